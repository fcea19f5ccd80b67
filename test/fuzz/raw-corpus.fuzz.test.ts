/**
 * A mutated raw-request corpus against a running Sluice, on both downstream engines (uWS, and the
 * own HTTP/1.1 engine with pipelining): valid requests (plain, with a sized or chunked body,
 * pipelined pairs, a stream) are mutated byte by byte and in their structure, sent on a new
 * connection that is half-closed once an answer starts (or 100 ms passed without one: a request
 * whose answer has not started is abandoned at the half-close), and whatever comes back must be
 * well-formed HTTP/1.1 responses (or nothing) followed by the close, within a bound: no crash, no
 * hang. Afterwards Sluice still answers and holds no request.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { waitFor } from '../helpers/sluice.js';
import { FUZZ_TIMEOUT_MS, SOCKET_RUNS, fuzzParams } from './fuzz-runs.js';
import { exchange, readResponses, startTwoEngineTarget, type TwoEngineTarget } from './raw-exchange.js';

/** Longest time a case may take from the client's half-close to Sluice's close, ms. */
const CASE_BOUND_MS = 5000;

const BODY = '{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}';
const CORPUS: string[] = [
  'GET /v1/models HTTP/1.1\r\nHost: a.example\r\n\r\n',
  `POST /v1/chat/completions HTTP/1.1\r\nHost: a.example\r\nContent-Type: application/json\r\nContent-Length: ${BODY.length}\r\n\r\n${BODY}`,
  `POST /v1/chat/completions HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n${BODY.length.toString(16)}\r\n${BODY}\r\n0\r\n\r\n`,
  `POST /v1/chat/completions HTTP/1.1\r\nHost: a.example\r\nContent-Length: ${BODY.length}\r\nX-Fault: ok-sse\r\n\r\n${BODY}`,
  'GET /v1/models?x=1 HTTP/1.1\r\nHost: a.example\r\nConnection: keep-alive\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n',
  'GET /v1/models HTTP/1.0\r\n\r\n',
  `POST /v1/embeddings HTTP/1.1\r\nHost: a.example\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n{}`,
];

/** Bytes that mean something to an HTTP/1.1 parser. */
const SPECIAL = [
  '\r',
  '\n',
  '\r\n',
  '\0',
  ' ',
  '\t',
  ':',
  ',',
  ';',
  '-',
  '0',
  '9',
  'x',
  '\u00ff',
  'chunked',
  'Content-Length: 5\r\n',
  'Transfer-Encoding: chunked\r\n',
  'Host: b\r\n',
  '\r\n\r\n',
  'HTTP/1.1',
  '%00',
  '/../',
];

type Mutation =
  | { kind: 'insert'; at: number; text: string }
  | { kind: 'delete'; at: number; len: number }
  | { kind: 'flip'; at: number; byte: number }
  | { kind: 'dupLine' | 'dropLine'; at: number }
  | { kind: 'truncate'; at: number };

const mutation: fc.Arbitrary<Mutation> = fc.oneof(
  fc.record({ kind: fc.constant('insert' as const), at: fc.nat(), text: fc.constantFrom(...SPECIAL) }),
  fc.record({ kind: fc.constant('delete' as const), at: fc.nat(), len: fc.integer({ min: 1, max: 6 }) }),
  fc.record({ kind: fc.constant('flip' as const), at: fc.nat(), byte: fc.integer({ min: 0, max: 255 }) }),
  fc.record({ kind: fc.constantFrom('dupLine' as const, 'dropLine' as const), at: fc.nat() }),
  fc.record({ kind: fc.constant('truncate' as const), at: fc.nat() }),
);

function mutate(text: string, ms: readonly Mutation[]): Buffer {
  let b = Buffer.from(text, 'latin1');
  for (const m of ms) {
    const at = m.at % (b.length + 1);
    switch (m.kind) {
      case 'insert':
        b = Buffer.concat([b.subarray(0, at), Buffer.from(m.text, 'latin1'), b.subarray(at)]);
        break;
      case 'delete':
        b = Buffer.concat([b.subarray(0, at), b.subarray(at + m.len)]);
        break;
      case 'flip':
        if (at < b.length) b[at] = m.byte;
        break;
      case 'truncate':
        b = b.subarray(0, at);
        break;
      default: {
        const lines = b.toString('latin1').split('\r\n');
        const i = m.at % lines.length;
        if (m.kind === 'dupLine') lines.splice(i, 0, lines[i]!);
        else lines.splice(i, 1);
        b = Buffer.from(lines.join('\r\n'), 'latin1');
      }
    }
  }
  return b;
}

describe('mutated raw requests against a running Sluice (property)', { timeout: FUZZ_TIMEOUT_MS }, () => {
  let target: TwoEngineTarget | null = null;

  before(async () => {
    target = await startTwoEngineTarget();
  });

  after(async () => {
    await target?.close();
  });

  it('answers every mutated request with well-formed responses or a close, in bounded time, on both engines', async (tc) => {
    let answered = 0;
    let silent = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...CORPUS),
        fc.array(mutation, { maxLength: 4 }),
        fc.constantFrom(0, 1),
        async (base, ms, engine) => {
          const bytes = mutate(base, ms);
          const r = await exchange(target!.urls[engine]!, bytes, {
            halfClose: 'after-answer',
            boundMs: CASE_BOUND_MS,
          });
          assert.ok(
            r.closed,
            `no close within ${CASE_BOUND_MS} ms after ${JSON.stringify(bytes.toString('latin1'))}`,
          );
          const problem = readResponses(r.data).problem;
          assert.equal(problem, null, `${problem} for ${JSON.stringify(bytes.toString('latin1'))}`);
          if (r.data.length > 0) answered++;
          else silent++;
        },
      ),
      fuzzParams(SOCKET_RUNS),
    );
    tc.diagnostic(`${answered} cases answered, ${silent} closed without an answer`);
    // Most mutations keep a request valid or make it one Sluice refuses with an answer: a run where
    // few were answered no longer checks response framing (1,083 of 2,000 were on 2026-11-25).
    assert.ok(answered >= SOCKET_RUNS / 10, `only ${answered} of ${SOCKET_RUNS} cases were answered`);
    const health = await fetch(`${target!.urls[0]!}/v1/models`);
    assert.equal(health.status, 200, 'Sluice still serves');
    await health.arrayBuffer();
    await waitFor(() => target!.t.sluice.stats.inFlight === 0, 5000, 'no request left in flight');
  });
});
