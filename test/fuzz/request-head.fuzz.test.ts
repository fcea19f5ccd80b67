/**
 * Property tests of head capture and its framing checks (`proxy/server/request-head.ts`, shared by
 * both engines): any list of header fields is captured without throwing; the framing verdict
 * follows RFC 9112 (one Content-Length of digits, Transfer-Encoding only as a lone plain `chunked`
 * on HTTP/1.1 and never with Content-Length, exactly one valid Host); hop-by-hop headers, those
 * named in Connection and the client's own forwarding values never reach the node; and one
 * request's fields never leak into the next capture.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import {
  addHeader,
  beginHead,
  endHead,
  useTargetAuthority,
  type RequestHead,
} from '../../proxy/server/request-head.js';
import { FUZZ_TIMEOUT_MS, fuzzParams } from './fuzz-runs.js';

/**
 * Header names the node never receives as the client sent them: hop-by-hop fields, framing Sluice
 * redoes, and the forwarding fields and request id Sluice writes itself.
 */
const NOT_FORWARDED = [
  'host',
  'content-length',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'upgrade',
  'te',
  'trailer',
  'proxy-connection',
  'proxy-authorization',
  'x-forwarded-for',
  'x-forwarded-host',
  'x-forwarded-proto',
  'forwarded',
  'x-request-id',
  'expect',
];

/** Header names a hostile or sloppy client might send, plus random tokens. */
const NAMES = [...NOT_FORWARDED, 'content-type', 'authorization', 'x-api-key', 'x-custom'];

const TOKEN = fc.stringMatching(/^[a-z0-9!#$%&'*+.^_`|~-]{1,20}$/);
const name = fc.oneof(fc.constantFrom(...NAMES), TOKEN);

/** Values that probe each rule, and anything at all. */
const VALUES = new Map<string, string[]>(
  Object.entries({
    'content-length': [
      '5',
      '05',
      '0',
      '+5',
      '-1',
      '0x5',
      '5, 5',
      ' 5',
      '5 ',
      '1e3',
      '99999999999999999999',
      '',
    ],
    'transfer-encoding': [
      'chunked',
      'Chunked',
      ' chunked ',
      'gzip',
      'chunked, gzip',
      'gzip, chunked',
      'identity',
      '',
    ],
    host: [
      'a.example',
      'a.example:8080',
      '[::1]:8080',
      '127.0.0.1',
      'bad host',
      'user@host',
      'a/b',
      'h:port',
      '',
    ],
    connection: [
      'close',
      'keep-alive',
      'x-custom',
      'close, x-custom',
      'Upgrade, Content-Type',
      'x-request-id',
    ],
  }),
);
const anyValue = fc.string({ maxLength: 40, unit: 'binary-ascii' });

const field = name.chain((n) =>
  fc.tuple(fc.constant(n), VALUES.has(n) ? fc.oneof(fc.constantFrom(...VALUES.get(n)!), anyValue) : anyValue),
);

interface HeadCase {
  method: string;
  path: string;
  query: string;
  http10: boolean;
  authority: string | null;
  fields: [string, string][];
}

const headCase: fc.Arbitrary<HeadCase> = fc.record({
  method: fc.constantFrom('GET', 'POST', 'HEAD', 'PUT', 'OPTIONS'),
  path: fc.constantFrom('/', '/v1/chat/completions', '/v1/embeddings', '/a%20b'),
  query: fc.constantFrom('', 'x=1', 'a=b&c=d'),
  http10: fc.boolean(),
  authority: fc.option(fc.constantFrom('a.example', 'a.example:9', 'bad host', '[::1]'), { nil: null }),
  fields: fc.array(field, { maxLength: 12 }),
});

function capture(c: HeadCase, remote = '10.0.0.1'): RequestHead {
  beginHead(c.method, c.path, c.query, c.http10);
  if (c.authority !== null) useTargetAuthority(c.authority);
  for (const [n, v] of c.fields) addHeader(n, v);
  const h = endHead(remote, 'http');
  // A copy: the head object is shared by every capture.
  return { ...h, headers: [...h.headers] };
}

/** Hosts known valid and invalid (RFC 9112 §3.2: uri-host [":" port]). */
const VALID_HOSTS = new Set([
  'a.example',
  'a.example:8080',
  '[::1]:8080',
  '127.0.0.1',
  '',
  'a.example:9',
  '[::1]',
]);
const INVALID_HOSTS = new Set(['bad host', 'user@host', 'a/b', 'h:port']);

/**
 * The framing verdict the RFC asks for: null (accept) or 'refuse'; undefined when a Host value is
 * neither known valid nor known invalid (random text), where only "never throws" is checked.
 */
function expectedVerdict(c: HeadCase): 'refuse' | null | undefined {
  const of = (n: string): string[] => c.fields.filter(([k]) => k === n).map(([, v]) => v);
  const cl = of('content-length');
  const te = of('transfer-encoding');
  const host = of('host');
  if (cl.length > 1 || te.length > 1) return 'refuse';
  if (te.length === 1 && (c.http10 || te[0]!.trim().toLowerCase() !== 'chunked' || cl.length === 1))
    return 'refuse';
  if (cl.length === 1 && !/^[0-9]{1,15}$/.test(cl[0]!)) return 'refuse';
  if (host.length > 1) return 'refuse';
  if (host.length === 0 && !c.http10) return 'refuse';
  for (const h of [...host, ...(c.authority === null ? [] : [c.authority])]) {
    if (INVALID_HOSTS.has(h)) return 'refuse';
    if (!VALID_HOSTS.has(h)) return ambiguousKey(c) ? 'refuse' : undefined;
  }
  return ambiguousKey(c) ? 'refuse' : null;
}

/**
 * Credentials are one field (RFC 9110 §11.6.2): two Authorization or two x-api-key headers, or a
 * Bearer key and an x-api-key that differ, leave the tenant ambiguous.
 */
function ambiguousKey(c: HeadCase): boolean {
  const of = (n: string): string[] => c.fields.filter(([k]) => k === n).map(([, v]) => v);
  const auth = of('authorization');
  const key = of('x-api-key');
  if (auth.length > 1 || key.length > 1) return true;
  if (auth.length !== 1 || key.length !== 1) return false;
  const v = auth[0]!.trim();
  if (!(v.length > 7 && v.slice(0, 7).toLowerCase() === 'bearer ')) return false;
  return v.slice(7).trim() !== key[0]!.trim();
}

describe('request head capture (property)', { timeout: FUZZ_TIMEOUT_MS }, () => {
  it('refuses exactly the ambiguous framings and accepts the rest', () => {
    fc.assert(
      fc.property(headCase, (c) => {
        const h = capture(c);
        const want = expectedVerdict(c);
        if (want === undefined) return;
        assert.equal(h.framingError === null ? null : 'refuse', want, `framing error: ${h.framingError}`);
        if (want === null) {
          const cl = c.fields.find(([k]) => k === 'content-length');
          assert.equal(h.contentLength, cl === undefined ? -1 : Number(cl[1]));
          assert.ok(Number.isSafeInteger(h.contentLength));
          assert.equal(
            h.chunked,
            c.fields.some(([k]) => k === 'transfer-encoding'),
          );
        }
      }),
      fuzzParams(),
    );
  });

  it('forwards no hop-by-hop header, none named in Connection, and its own forwarding headers last', () => {
    const hop = new Set(NOT_FORWARDED);
    fc.assert(
      fc.property(headCase, fc.ipV4(), (c, remote) => {
        const h = capture(c, remote);
        const out = h.headers;
        assert.equal(out.length % 2, 0);
        // Without a host (an empty Host field) there is no X-Forwarded-Host to send.
        if (h.hostName === '') {
          const tail = out.slice(-4);
          assert.deepEqual([tail[0], tail[2], tail[3]], ['x-forwarded-for', 'x-forwarded-proto', 'http']);
          assert.ok(!out.includes('x-forwarded-host'));
          return;
        }
        const tail = out.slice(-6);
        assert.deepEqual(
          [tail[0], tail[2], tail[4], tail[5]],
          ['x-forwarded-for', 'x-forwarded-host', 'x-forwarded-proto', 'http'],
        );
        // The client's values come first, in order (empty ones may be dropped), then its address.
        const xff = tail[1]!;
        assert.ok(xff === remote || xff.endsWith(`, ${remote}`), `x-forwarded-for ${xff}`);
        let from = 0;
        for (const [k, v] of c.fields) {
          if (k !== 'x-forwarded-for' || v === '') continue;
          const at = xff.indexOf(v, from);
          assert.ok(at >= from, `client value ${JSON.stringify(v)} kept in order in ${JSON.stringify(xff)}`);
          from = at + v.length;
        }
        const named = new Set(
          c.fields
            .filter(([k]) => k === 'connection')
            .flatMap(([, v]) => v.toLowerCase().split(','))
            .map((t) => t.trim())
            .filter((t) => t !== '' && t !== 'close' && t !== 'keep-alive'),
        );
        for (let i = 0; i < out.length - 6; i += 2) {
          assert.ok(!hop.has(out[i]!), `hop-by-hop ${out[i]} forwarded`);
          assert.ok(!named.has(out[i]!), `${out[i]} named in Connection forwarded`);
        }
        assert.equal(h.headerCount, c.fields.length);
        assert.equal(
          h.headerBytes,
          c.fields.reduce((n, [k, v]) => n + k.length + v.length + 4, 0),
        );
      }),
      fuzzParams(),
    );
  });

  it('captures a head the same way whatever was captured before it (no state leaks between requests)', () => {
    fc.assert(
      fc.property(headCase, headCase, (a, b) => {
        const alone = capture(b);
        capture(a);
        const after = capture(b);
        assert.deepEqual(after, alone);
      }),
      fuzzParams(),
    );
  });

  it('never throws on arbitrary names and values', () => {
    fc.assert(
      fc.property(
        fc.array(fc.tuple(fc.string({ maxLength: 30 }), fc.string({ maxLength: 60 })), { maxLength: 20 }),
        fc.boolean(),
        (fields, http10) => {
          beginHead('GET', '/', '', http10);
          for (const [n, v] of fields) addHeader(n.toLowerCase(), v);
          const h = endHead('::1');
          assert.ok(h.framingError === null || typeof h.framingError === 'string');
        },
      ),
      fuzzParams(),
    );
  });
});
