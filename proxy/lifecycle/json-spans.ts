/**
 * Where the members and elements of a JSON text are, as source slices: for passing a request body
 * on exactly as a client wrote it (a batch line's `body`, a synchronous batch item) where parsing
 * and serialising again would change it (numbers beyond double precision, such as a 64-bit `seed`).
 * The texts given here are already valid JSON (`JSON.parse` accepted them); nothing is checked
 * again. Batch paths only, not the request path.
 */

/** One member of an object: its name and the source slice of its value. */
interface MemberSpan {
  key: string;
  /** Where the member starts (its name's opening quote). */
  start: number;
  valueStart: number;
  valueEnd: number;
}

/** The members of the JSON object `text`, in order (a repeated name appears each time). */
function memberSpans(text: string): MemberSpan[] | null {
  let i = skipSpace(text, 0);
  if (text[i] !== '{') return null;
  const out: MemberSpan[] = [];
  i = skipSpace(text, i + 1);
  while (i < text.length && text[i] !== '}') {
    const start = i;
    const keyEnd = stringEnd(text, i);
    const key = JSON.parse(text.slice(i, keyEnd)) as string;
    const valueStart = skipSpace(text, skipSpace(text, keyEnd) + 1); // past the colon
    const valueEnd = valueEndAt(text, valueStart);
    out.push({ key, start, valueStart, valueEnd });
    i = skipSpace(text, valueEnd);
    if (text[i] === ',') i = skipSpace(text, i + 1);
  }
  return out;
}

/**
 * The source text of member `name` of the JSON object `text`: the last one when the name repeats
 * (the one `JSON.parse` keeps), or null when absent or `text` is no object.
 *
 * @example
 * rawMember('{"a": 1, "body": {"seed": 9007199254740993}}', 'body'); // '{"seed": 9007199254740993}'
 */
export function rawMember(text: string, name: string): string | null {
  const members = memberSpans(text);
  if (members === null) return null;
  let found: string | null = null;
  for (const m of members) if (m.key === name) found = text.slice(m.valueStart, m.valueEnd);
  return found;
}

/** The JSON object `text` without its members named `name`, every other member as written. */
export function withoutMember(text: string, name: string): string | null {
  const members = memberSpans(text);
  if (members === null) return null;
  const kept: string[] = [];
  for (const m of members) if (m.key !== name) kept.push(text.slice(m.start, m.valueEnd));
  return `{${kept.join(',')}}`;
}

/** The source texts of the elements of the JSON array `text`, or null when it is no array. */
export function rawElements(text: string): string[] | null {
  let i = skipSpace(text, 0);
  if (text[i] !== '[') return null;
  const out: string[] = [];
  i = skipSpace(text, i + 1);
  while (i < text.length && text[i] !== ']') {
    const end = valueEndAt(text, i);
    out.push(text.slice(i, end));
    i = skipSpace(text, end);
    if (text[i] === ',') i = skipSpace(text, i + 1);
  }
  return out;
}

function skipSpace(text: string, i: number): number {
  // A byte order mark before the text is skipped like the whitespace around it.
  if (i === 0 && text.charCodeAt(0) === 0xfeff) i = 1;
  while (i < text.length && (text[i] === ' ' || text[i] === '\t' || text[i] === '\n' || text[i] === '\r'))
    i++;
  return i;
}

/**
 * True when the JSON object `text` names a member twice. A node's parser may keep the first where
 * `JSON.parse` keeps the last: such a body is sent serialised again rather than as written.
 */
export function repeatsMember(text: string): boolean {
  const members = memberSpans(text);
  if (members === null) return false;
  const seen = new Set<string>();
  for (const m of members) {
    if (seen.has(m.key)) return true;
    seen.add(m.key);
  }
  return false;
}

/** The index after the string starting at `i` (a `"`). */
function stringEnd(text: string, i: number): number {
  let j = i + 1;
  while (j < text.length && text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
  return j + 1;
}

/** The index after the JSON value starting at `i`. */
function valueEndAt(text: string, i: number): number {
  const c = text[i];
  if (c === '"') return stringEnd(text, i);
  if (c === '{' || c === '[') {
    let depth = 0;
    let j = i;
    while (j < text.length) {
      const d = text[j];
      if (d === '"') {
        j = stringEnd(text, j);
        continue;
      }
      if (d === '{' || d === '[') depth++;
      else if (d === '}' || d === ']') {
        depth--;
        if (depth === 0) return j + 1;
      }
      j++;
    }
    return j;
  }
  let j = i;
  while (j < text.length && !',}] \t\n\r'.includes(text[j]!)) j++;
  return j;
}
