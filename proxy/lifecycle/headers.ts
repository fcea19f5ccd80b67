/**
 * Header rules shared by both directions: which headers are hop-by-hop (RFC 9110 §7.6.1) and are
 * never forwarded, and the building of the response header list sent to the client.
 *
 * Header values inside Sluice are byte strings, as in Node's `http`: one character per byte
 * (latin1), so that a value a node sent with bytes of 0x80 and above (obs-text, RFC 9110 §5.5, such
 * as a UTF-8 file name) reaches the client byte for byte.
 */

/**
 * Request and response headers a proxy consumes rather than forwards. `content-length` and `host`
 * are recomputed for the next hop; `date` is written by the server itself.
 */
export const HOP_BY_HOP: ReadonlySet<string> = new Set([
  'connection',
  'proxy-connection',
  'keep-alive',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/**
 * Request headers never forwarded to a node: the hop-by-hop ones, and `proxy-authorization`, the
 * client's credentials for a proxy (RFC 9110 §11.7.2): Sluice asks for none, and a node must not
 * see them.
 */
export const REQUEST_NOT_FORWARDED: ReadonlySet<string> = new Set([...HOP_BY_HOP, 'proxy-authorization']);

/**
 * Response headers never copied from the node to the client: the hop-by-hop ones, and those the
 * server writes itself. uWS adds `Date` and its own `uWebSockets` mark to every response, so a node
 * that runs on uWS would otherwise reach the client with each of them twice.
 */
const RESPONSE_SKIP: ReadonlySet<string> = new Set([
  ...HOP_BY_HOP,
  'content-length',
  'date',
  'uwebsockets',
  'x-request-id',
]);

/**
 * What the session needs from a node's response head, read in one pass over undici's raw header
 * list. One instance is reused: read it before the next head is parsed.
 */
export interface ResponseHead {
  /** Headers for the client, flat `[name, value, ...]`, lower-case names, `x-request-id` last. */
  headers: string[];
  /** `content-type`, or '' when absent. */
  contentType: string;
  /** `content-length` as sent, or '' when absent. */
  contentLength: string;
  /** `retry-after` as sent, or undefined when absent. */
  retryAfter: string | undefined;
  /** `transfer-encoding` values joined with `, `, or '' when absent. */
  transferEncoding: string;
  /**
   * True when some value holds a byte of 0x80 or above: the writer must then send those values as
   * latin1 bytes (a uWS response encodes strings as UTF-8, which would turn each such byte into two).
   */
  binary: boolean;
}

const head: ResponseHead = {
  headers: [],
  contentType: '',
  contentLength: '',
  retryAfter: undefined,
  transferEncoding: '',
  binary: false,
};

/**
 * Reads a node's raw response head (`[name, value, ...]` as Buffers, names in the node's case):
 * builds the client's header list without hop-by-hop headers, those named in `Connection`, and the
 * ones the server writes itself (keeping repeated values such as set-cookie), appends
 * `x-request-id`, and picks out the few values the session reads. Returns the shared ResponseHead.
 */
export function readResponseHead(raw: readonly Buffer[], requestId: string): ResponseHead {
  // HOT
  const out: string[] = [];
  let connection = '';
  head.contentType = '';
  head.contentLength = '';
  head.retryAfter = undefined;
  head.transferEncoding = '';
  let binary = false;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const nameBytes = raw[i]!;
    const known = knownName(nameBytes);
    let name: string;
    if (known !== null) {
      // A header dropped whatever its value (Date, the node's x-request-id, ...) is not decoded.
      if (known.dropped) continue;
      name = known.text;
    } else name = lowerName(nameBytes.toString('latin1'));
    const value = raw[i + 1]!.toString('latin1');
    switch (name) {
      case 'content-type':
        head.contentType = value;
        break;
      case 'content-length':
        head.contentLength = value;
        continue;
      case 'retry-after':
        head.retryAfter = value;
        break;
      case 'connection':
        connection = connection === '' ? value : `${connection}, ${value}`;
        continue;
      case 'transfer-encoding':
        head.transferEncoding = head.transferEncoding === '' ? value : `${head.transferEncoding}, ${value}`;
        continue;
    }
    if (RESPONSE_SKIP.has(name)) continue;
    if (!binary && NON_ASCII.test(value)) binary = true;
    out.push(name, value);
  }
  if (connection !== '') {
    const named = connectionTokens(connection);
    if (named !== null) removeNamed(out, named);
  }
  out.push('x-request-id', requestId);
  head.headers = out;
  head.binary = binary;
  return head;
}

/** True when `s` has a character above U+007F. */
export function hasNonAscii(s: string): boolean {
  return NON_ASCII.test(s);
}

const NON_ASCII = /[^\x00-\x7f]/;

/**
 * True when a response's `transfer-encoding` is absent or exactly `chunked` (RFC 9112 §6.1). Any
 * other coding (gzip, chunked twice, ...) would reach the client undecoded once the hop-by-hop
 * header is dropped, so such an answer is refused as a protocol error.
 */
export function plainTransferCoding(te: string): boolean {
  // HOT
  return te === '' || te === 'chunked' || te.trim().toLowerCase() === 'chunked';
}

/** A header name the head reader recognises from its bytes, without decoding them. */
interface KnownName {
  /** The name in lower case, as bytes. */
  readonly bytes: Uint8Array;
  /** The same as a string (the one instance every head shares). */
  readonly text: string;
  /** Never sent to the client and its value never read: skipped before its value is decoded. */
  readonly dropped: boolean;
}

/** The names of a typical node's answer (vLLM's, SGLang's, a uWS node's) and those read above. */
const KNOWN_NAMES = [
  'content-type',
  'content-length',
  'retry-after',
  'connection',
  'transfer-encoding',
  'keep-alive',
  'date',
  'server',
  'x-request-id',
  'uwebsockets',
  'cache-control',
  'vary',
];

/** Values read by `readResponseHead` although the header itself is not forwarded. */
const VALUE_READ: ReadonlySet<string> = new Set(['content-length', 'connection', 'transfer-encoding']);

/** KNOWN_NAMES by byte length. */
const KNOWN_BY_LENGTH: (KnownName[] | undefined)[] = [];
for (const text of KNOWN_NAMES) {
  (KNOWN_BY_LENGTH[text.length] ??= []).push({
    bytes: Buffer.from(text, 'latin1'),
    text,
    dropped: RESPONSE_SKIP.has(text) && !VALUE_READ.has(text),
  });
}

/**
 * The known name `b` spells in any letter case, or null. Names reach here checked by the HTTP
 * parser (tokens: letters, digits and a few marks), so setting bit 0x20 of each byte folds the case
 * of letters and leaves digits and `-` as they are; no other token byte folds onto a letter, a
 * digit or `-`.
 */
function knownName(b: Buffer): KnownName | null {
  // HOT
  const list = KNOWN_BY_LENGTH[b.length];
  if (list === undefined) return null;
  for (let k = 0; k < list.length; k++) {
    const known = list[k]!;
    const bytes = known.bytes;
    let i = 0;
    while (i < bytes.length && (b[i]! | 0x20) === bytes[i]) i++;
    if (i === bytes.length) return known;
  }
  return null;
}

/** `name` in lower case, without allocating when it already is (the usual case). */
function lowerName(name: string): string {
  // HOT
  for (let i = 0; i < name.length; i++) {
    const c = name.charCodeAt(i);
    if (c >= 65 && c <= 90) return name.toLowerCase();
  }
  return name;
}

/** Drops every pair whose name is in `names`, in place. */
export function removeNamed(headers: string[], names: ReadonlySet<string>): void {
  let w = 0;
  for (let r = 0; r < headers.length; r += 2) {
    if (names.has(headers[r]!)) continue;
    headers[w++] = headers[r]!;
    headers[w++] = headers[r + 1]!;
  }
  headers.length = w;
}

/**
 * Header names listed in a `Connection` header (RFC 9110 §7.6.1: they are hop-by-hop too), or null
 * when it names none beyond the usual `close` / `keep-alive`.
 */
export function connectionTokens(value: string | string[] | undefined): Set<string> | null {
  if (value === undefined) return null;
  const v = (typeof value === 'string' ? value : value.join(',')).toLowerCase();
  if (v === 'close' || v === 'keep-alive') return null;
  const names = new Set<string>();
  for (const t of v.split(',')) {
    const name = t.trim();
    if (name !== '' && name !== 'close' && name !== 'keep-alive') names.add(name);
  }
  return names.size > 0 ? names : null;
}

const EVENT_STREAM = 'text/event-stream';

/** True for a `Content-Type` of an SSE stream; media types are case-insensitive (RFC 9110 §8.3.1). */
export function isEventStream(contentType: string): boolean {
  // HOT
  if (contentType.startsWith(EVENT_STREAM)) return true;
  // Other types (application/json) are told apart by their first letter without a copy.
  if ((contentType.charCodeAt(0) | 0x20) !== 0x74 || contentType.length < EVENT_STREAM.length) return false;
  return contentType.slice(0, EVENT_STREAM.length).toLowerCase() === EVENT_STREAM;
}

/** The first value of header `name` (lower case) in a flat `[name, value, ...]` list, or undefined. */
export function getFlat(list: readonly string[], name: string): string | undefined {
  for (let i = 0; i < list.length; i += 2) if (list[i] === name) return list[i + 1];
  return undefined;
}

/**
 * `base` (flat, lower-case names) with every header named in `extra` replaced by `extra`'s value:
 * a new list; `base` is not changed. For a pool's `request_headers`.
 */
export function withHeaders(base: readonly string[], extra: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < base.length; i += 2) {
    const name = base[i]!;
    let replaced = false;
    for (let j = 0; j < extra.length; j += 2) if (extra[j] === name) replaced = true;
    if (!replaced) out.push(name, base[i + 1]!);
  }
  for (let j = 0; j < extra.length; j++) out.push(extra[j]!);
  return out;
}
