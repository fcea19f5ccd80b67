/**
 * Generated ambiguous requests against a running Sluice, on both downstream engines: a valid head
 * (random method, padding fields, field-name case, whitespace and field order) gets one framing
 * ambiguity (repeated or malformed Content-Length, a transfer coding other than chunked, both
 * framings, Transfer-Encoding on HTTP/1.0, obs-fold, whitespace before a colon, a control byte in
 * a value, a bare LF, a field name that is not a token, a bad chunk, a bad or missing Host), and a
 * valid request is pipelined behind it. Every case is refused (never a success), the connection
 * closes, and the node never receives the ambiguous request nor the one behind it: each carries a
 * marker the node's record is searched for.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import type { SeenRequest } from '../../loadtest/chaos/broken-node.js';
import { waitFor } from '../helpers/sluice.js';
import { FUZZ_TIMEOUT_MS, SOCKET_RUNS, fuzzParams } from './fuzz-runs.js';
import { exchange, readResponses, startTwoEngineTarget, type TwoEngineTarget } from './raw-exchange.js';

/** Longest wait for Sluice's own engine to answer and close, ms. */
const CASE_BOUND_MS = 3000;
/**
 * How long a uWS connection that sent nothing back is watched, ms: the uWS engine stays silent on
 * some malformed heads until its ~10 s timeout (docs/security.md, uWS deviations).
 */
const UWS_SILENCE_MS = 150;

/** A framing ambiguity, and whether the uWS engine is held to it (false: a documented deviation). */
interface Family {
  name: string;
  uws: boolean;
  build: fc.Arbitrary<Ambiguity>;
}

/** What a family changes in the valid request. */
interface Ambiguity {
  /** Framing fields in place of `Content-Length: <n>`. */
  framing: [string, string][];
  /** The body after the head (default: the JSON body, sized). */
  body?: (json: string) => string;
  /** The HTTP version (default 1.1). */
  version?: string;
  /** The Host fields (default one valid Host). */
  hosts?: string[];
  /** A change to the head's lines after they are built (index 0 is the request line). */
  lines?: (lines: string[]) => string[];
}

const ows = fc.constantFrom('', ' ', '\t', '  ');
const hex = (n: number): string => n.toString(16);
const sized = (json: string): string => json;
const chunkedBody = (json: string): string => `${hex(json.length)}\r\n${json}\r\n0\r\n\r\n`;
/** A random index of a field line (1.. the last field). */
const fieldLine = fc.nat();
const atField = (lines: string[], n: number): number => 1 + (n % Math.max(1, lines.length - 1));
const L = '<L>'; // replaced by the body's length

const FAMILIES: Family[] = [
  {
    name: 'a Content-Length list',
    uws: true,
    build: fc.tuple(ows, ows).map(([a, b]) => ({ framing: [['Content-Length', `${L}${a},${b}${L}`]] })),
  },
  {
    name: 'a malformed Content-Length',
    uws: true,
    build: fc
      .constantFrom(`+${L}`, '-1', `0x<H>`, `${L}.0`, `${L} ${L}`, `${L}e0`, `0000000000000000000${L}`)
      .map((v) => ({ framing: [['Content-Length', v]] })),
  },
  {
    name: 'two Content-Length fields',
    uws: true,
    build: fc.tuple(fc.boolean(), fc.nat(3)).map(([same, d]) => ({
      framing: [
        ['Content-Length', L],
        ['Content-Length', same ? L : `${L}${d}`],
      ],
    })),
  },
  {
    name: 'a transfer coding other than chunked',
    uws: true,
    build: fc
      .constantFrom('gzip', 'identity', 'gzip, chunked', 'chunked, chunked', 'chunked, gzip', 'deflate')
      .map((v) => ({
        framing: [['Transfer-Encoding', v]],
        body: v.endsWith('chunked') ? chunkedBody : sized,
      })),
  },
  {
    name: 'Transfer-Encoding and Content-Length',
    uws: true,
    build: fc.boolean().map((first) => ({
      framing: first
        ? [
            ['Transfer-Encoding', 'chunked'],
            ['Content-Length', L],
          ]
        : [
            ['Content-Length', L],
            ['Transfer-Encoding', 'chunked'],
          ],
      body: chunkedBody,
    })),
  },
  {
    name: 'two Transfer-Encoding fields',
    uws: true,
    build: fc.constant({
      framing: [
        ['Transfer-Encoding', 'chunked'],
        ['Transfer-Encoding', 'chunked'],
      ],
      body: chunkedBody,
    }),
  },
  {
    name: 'Transfer-Encoding on HTTP/1.0',
    uws: true,
    build: fc.constant({ framing: [['Transfer-Encoding', 'chunked']], body: chunkedBody, version: '1.0' }),
  },
  {
    name: 'obs-fold',
    uws: true,
    build: fc.tuple(fieldLine, fc.constantFrom(' ', '\t')).map(([n, sp]) => ({
      framing: [['Content-Length', L]],
      lines: (ls: string[]) => {
        const i = atField(ls, n);
        return [...ls.slice(0, i + 1), `${sp}folded`, ...ls.slice(i + 1)];
      },
    })),
  },
  {
    name: 'whitespace before a colon',
    uws: true,
    build: fc.tuple(fieldLine, fc.constantFrom(' ', '\t')).map(([n, sp]) => ({
      framing: [['Content-Length', L]],
      lines: (ls: string[]) => ls.map((l, i) => (i === atField(ls, n) ? l.replace(':', `${sp}:`) : l)),
    })),
  },
  {
    name: 'a NUL or bare CR in a value',
    uws: true,
    build: fc.tuple(fieldLine, fc.constantFrom('\0', '\r'), fc.nat()).map(([n, c, p]) => ({
      framing: [['Content-Length', L]],
      lines: (ls: string[]) =>
        ls.map((l, i) => {
          if (i !== atField(ls, n)) return l;
          const colon = l.indexOf(':') + 1;
          const at = colon + 1 + (p % Math.max(1, l.length - colon - 1));
          return `${l.slice(0, at)}${c}${l.slice(at)}x`;
        }),
    })),
  },
  {
    name: 'a field line ended by a bare LF',
    uws: true,
    build: fieldLine.map((n) => ({
      framing: [['Content-Length', L]],
      lines: (ls: string[]) => {
        const i = atField(ls, n);
        return [...ls.slice(0, i), `${ls[i]}\n${ls[i + 1] ?? ''}`, ...ls.slice(i + 2)];
      },
    })),
  },
  {
    name: 'a field name that is not a token',
    uws: true,
    build: fc
      .tuple(
        fieldLine,
        fc.constantFrom(
          '(',
          ')',
          '<',
          '>',
          '@',
          ',',
          ';',
          '"',
          '/',
          '[',
          ']',
          '?',
          '=',
          '{',
          '}',
          '\x01',
          '\x7f',
        ),
        fc.nat(),
      )
      .map(([n, c, p]) => ({
        framing: [['Content-Length', L]],
        lines: (ls: string[]) =>
          ls.map((l, i) => {
            if (i !== atField(ls, n)) return l;
            const at = 1 + (p % Math.max(1, l.indexOf(':') - 1));
            return `${l.slice(0, at)}${c}${l.slice(at)}`;
          }),
      })),
  },
  {
    name: 'a bad chunk size',
    uws: true,
    build: fc
      .constantFrom('zz', '0x<H>', '-<H>', '00000000000000000<H>', '<H>;', '<H>;a=', '<H>;a="b')
      .map((size) => ({
        framing: [['Transfer-Encoding', 'chunked']],
        body: (json: string) => `${size.replace('<H>', hex(json.length))}\r\n${json}\r\n0\r\n\r\n`,
      })),
  },
  {
    // uWS serves these (docs/security.md, uWS deviations); Sluice's own engine refuses them.
    name: 'chunk-size whitespace, an empty chunk extension, or chunk data without its CRLF',
    uws: false,
    build: fc.constantFrom(' ', '\t', ' ;', 'XX').map((odd) => ({
      framing: [['Transfer-Encoding', 'chunked']],
      body: (json: string) =>
        odd === 'XX'
          ? `${hex(json.length)}\r\n${json}XX0\r\n\r\n`
          : `${hex(json.length)}${odd}\r\n${json}\r\n0\r\n\r\n`,
    })),
  },
  {
    name: 'a repeated or malformed Host',
    uws: true,
    build: fc
      .constantFrom(
        ['a.example', 'a.example'],
        ['a.example', 'b.example'],
        ['u@a.example'],
        ['a.example:x'],
        ['a b'],
      )
      .map((hosts) => ({ framing: [['Content-Length', L]], hosts })),
  },
  {
    // uWS stays silent until its own timeout: held by the silence window, like the other silent rows.
    name: 'no Host',
    uws: true,
    build: fc.constant({ framing: [['Content-Length', L]], hosts: [] }),
  },
];

/** The valid parts a case varies around its ambiguity. */
const shape = fc.record({
  method: fc.constantFrom('POST', 'PUT', 'PATCH'),
  pads: fc.array(
    fc.tuple(
      fc.constantFrom('X-Pad', 'Accept', 'User-Agent', 'X-Trace', 'Content-Type'),
      fc.stringMatching(/^[A-Za-z0-9._\-/=;]{0,12}$/),
    ),
    { maxLength: 5 },
  ),
  shout: fc.boolean(),
  space: ows,
  framingAt: fc.nat(),
});

type CaseShape = typeof shape extends fc.Arbitrary<infer T> ? T : never;

let caseId = 0;

/** The bytes of one case: the ambiguous request with marker `id`, then a valid one marked `id-next`. */
function build(s: CaseShape, a: Ambiguity, id: string): string {
  const json = `{"model":"m","user":"${id}","messages":[{"role":"user","content":"hi"}]}`;
  const fill = (v: string): string =>
    v.replaceAll(L, String(json.length)).replaceAll('<H>', hex(json.length));
  const name = (n: string): string => (s.shout ? n.toUpperCase() : n);
  const fields: [string, string][] = [
    ...(a.hosts ?? ['a.example']).map((h): [string, string] => ['Host', h]),
    ...s.pads,
  ];
  fields.splice(
    s.framingAt % (fields.length + 1),
    0,
    ...a.framing.map(([n, v]): [string, string] => [n, fill(v)]),
  );
  let lines = [
    `${s.method} /v1/chat/completions?fz=${id} HTTP/${a.version ?? '1.1'}`,
    ...fields.map(([n, v]) => `${name(n)}:${s.space}${v}`),
  ];
  if (a.lines !== undefined) lines = a.lines(lines);
  const next = `GET /v1/models?fz=${id}-next HTTP/1.1\r\nHost: a.example\r\n\r\n`;
  return `${lines.join('\r\n')}\r\n\r\n${(a.body ?? sized)(json)}${next}`;
}

/** True when the node received anything carrying `id` (target, a field or the body). */
function nodeSaw(requests: readonly SeenRequest[], id: string): boolean {
  return requests.some(
    (r) => r.path.includes(id) || r.body.includes(id) || [...r.headers.values()].some((v) => v.includes(id)),
  );
}

describe('ambiguous requests against a running Sluice (property)', { timeout: FUZZ_TIMEOUT_MS }, () => {
  let target: TwoEngineTarget | null = null;

  before(async () => {
    target = await startTwoEngineTarget();
  });

  after(async () => {
    await target?.close();
  });

  it('refuses every ambiguous request and closes, and the node never sees it nor the request behind it', async (tc) => {
    const family = fc
      .nat(FAMILIES.length - 1)
      .chain((i) => FAMILIES[i]!.build.map((a) => ({ f: FAMILIES[i]!, a })));
    const seen = new Map<string, number>();
    await fc.assert(
      fc.asyncProperty(family, shape, fc.constantFrom(0, 1), async ({ f, a }, s, engine) => {
        if (engine === 0 && !f.uws) return;
        const id = `c${++caseId}x`;
        const bytes = Buffer.from(build(s, a, id), 'latin1');
        const own = engine === 1;
        const r = await exchange(target!.urls[engine]!, bytes, {
          halfClose: false,
          boundMs: CASE_BOUND_MS,
          ...(own ? {} : { silenceMs: UWS_SILENCE_MS }),
        });
        const what = `${f.name} (${own ? 'own' : 'uws'} engine): ${JSON.stringify(bytes.toString('latin1'))}`;
        const { statuses, problem } = readResponses(r.data);
        assert.equal(problem, null, `${problem} for ${what}`);
        if (own) {
          assert.deepEqual(statuses, [400], `one 400 for ${what}`);
          assert.ok(r.closed, `the connection closes for ${what}`);
        } else {
          assert.ok(statuses.length <= 1, `at most one answer for ${what}`);
          if (statuses.length === 1) {
            assert.ok(statuses[0]! >= 400, `a refusal (${statuses[0]}) for ${what}`);
            assert.ok(r.closed, `the connection closes after the refusal for ${what}`);
          }
        }
        assert.ok(!nodeSaw(target!.node.requests, id), `the node never sees ${what}`);
        seen.set(f.name, (seen.get(f.name) ?? 0) + 1);
      }),
      fuzzParams(SOCKET_RUNS),
    );
    tc.diagnostic([...seen].map(([k, v]) => `${k}: ${v}`).join('; '));
    // A marked valid request does reach the node: the marker search above can see one.
    const ok = await fetch(`${target!.urls[1]!}/v1/models?fz=control`);
    assert.equal(ok.status, 200);
    await ok.arrayBuffer();
    assert.ok(nodeSaw(target!.node.requests, 'control'), 'a valid marked request reaches the node');
    await waitFor(() => target!.t.sluice.stats.inFlight === 0, 5000, 'no request left in flight');
  });
});
