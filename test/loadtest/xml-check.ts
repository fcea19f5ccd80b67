/**
 * A strict little XML well-formedness checker for the SVG tests: one root element, balanced tags,
 * quoted attributes, no raw `<` or stray `&` in text or attribute values. Returns the elements in
 * document order with their attributes; throws on the first problem. Test helper only.
 */

/** One element as found. */
export interface XmlElement {
  name: string;
  attrs: Record<string, string>;
  /** Text directly inside the element (entities decoded). */
  text: string;
}

const NAME = /^[A-Za-z_][\w.:-]*/;
const ENTITY = /&(amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);/g;

function decode(text: string, where: string): string {
  if (text.includes('<')) throw new Error(`raw '<' in ${where}`);
  if (text.replace(ENTITY, '').includes('&')) throw new Error(`stray '&' in ${where}`);
  return text.replace(
    ENTITY,
    (_, e: string) => ({ amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" })[e] ?? '?',
  );
}

/** Parses `xml`; throws a descriptive error when it is not well-formed. */
export function checkXml(xml: string): XmlElement[] {
  let i = 0;
  if (xml.startsWith('<?xml')) {
    const end = xml.indexOf('?>');
    if (end < 0) throw new Error('unterminated XML declaration');
    i = end + 2;
  }
  const stack: XmlElement[] = [];
  const all: XmlElement[] = [];
  let roots = 0;
  while (i < xml.length) {
    const lt = xml.indexOf('<', i);
    const text = xml.slice(i, lt < 0 ? xml.length : lt);
    const top = stack.at(-1);
    if (top === undefined) {
      if (text.trim() !== '')
        throw new Error(`text outside the root element: ${JSON.stringify(text.slice(0, 40))}`);
    } else top.text += decode(text, `<${top.name}> text`);
    if (lt < 0) break;
    const gt = xml.indexOf('>', lt);
    if (gt < 0) throw new Error('unterminated tag');
    const tag = xml.slice(lt + 1, gt);
    i = gt + 1;
    if (tag.startsWith('/')) {
      const open = stack.pop();
      if (open?.name !== tag.slice(1).trim())
        throw new Error(`</${tag.slice(1)}> closes <${open?.name ?? 'nothing'}>`);
      continue;
    }
    const selfClosing = tag.endsWith('/');
    let rest = selfClosing ? tag.slice(0, -1) : tag;
    const name = NAME.exec(rest)?.[0];
    if (name === undefined) throw new Error(`bad tag <${tag}>`);
    rest = rest.slice(name.length);
    const attrs: Record<string, string> = {};
    for (;;) {
      rest = rest.trimStart();
      if (rest === '') break;
      const m = /^([A-Za-z_][\w.:-]*)="([^"]*)"/.exec(rest);
      if (m === null) throw new Error(`bad attribute in <${name}>: ${JSON.stringify(rest.slice(0, 40))}`);
      const key = m[1] as string;
      if (key in attrs) throw new Error(`attribute ${key} repeated in <${name}>`);
      attrs[key] = decode(m[2] as string, `${name}@${key}`);
      rest = rest.slice(m[0].length);
    }
    const el: XmlElement = { name, attrs, text: '' };
    all.push(el);
    if (stack.length === 0 && ++roots > 1) throw new Error('more than one root element');
    if (!selfClosing) stack.push(el);
  }
  if (stack.length > 0) throw new Error(`<${stack.at(-1)?.name ?? ''}> is never closed`);
  if (roots !== 1) throw new Error('no root element');
  return all;
}
