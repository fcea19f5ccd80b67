/**
 * SIGTERM without loss: Sluice runs as a real process (`sluice serve`) behind simulated nodes while
 * clients send requests back to back and a few long SSE streams run; Sluice gets SIGTERM, must
 * finish what it accepted and exit 0 within its drain deadline, and a new Sluice starts on the same
 * port (a rolling restart). The clients retry only a refused connection; anything else that goes
 * wrong is a failure, except that clients opening a new connection per request are counted apart:
 * a connection the kernel completed in the instant before the listening socket closed is reset by
 * the kernel itself (see docs/security.md, Operations without loss).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Agent, request } from 'undici';
import { stopChild, type Child } from '../env/child-process.js';
import { freePort } from '../env/free-port.js';
import { serveChild } from '../env/sluice-process.js';
import { startSimFleet } from '../sim/fleet.js';

/** How a run goes. */
export interface SigtermOptions {
  /** SIGTERM + restart rounds. Default 1. */
  rounds?: number;
  /** Client loops sending requests back to back. Default 16. */
  clients?: number;
  /** Traffic before each SIGTERM, ms. Default 800. */
  warmMs?: number;
  /** `server.drain_timeout_ms` of the Sluice under test. Default 5000. */
  drainTimeoutMs?: number;
  /** Share of the clients that open a new connection per request (the rest keep alive). Default 0. */
  newConnectionShare?: number;
}

/** One SIGTERM. */
export interface SigtermRound {
  /** Exit code of the stopped Sluice (null: killed by a signal). */
  exitCode: number | null;
  /** SIGTERM to exit, ms. */
  exitMs: number;
}

/** What the run saw. */
export interface SigtermResult {
  rounds: SigtermRound[];
  drainTimeoutMs: number;
  /** Requests answered 200. */
  ok: number;
  /** Refused connections that were retried. */
  retries: number;
  /** Everything else, by error code or status. */
  failures: Record<string, number>;
  /** Requests on a new connection reset before any answer (the accept-queue race at the close). */
  acceptResets: number;
  /** Streams in flight at a SIGTERM that ended with `[DONE]` and no error event. */
  streamsOk: number;
  streamsFailed: number;
}

const BODY = '{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":4}';
const STREAM_BODY =
  '{"model":"m","messages":[{"role":"user","content":"stream"}],"max_tokens":20,"stream":true}';

function errorCode(e: unknown): string {
  const err = e as { code?: unknown; cause?: { code?: unknown }; message?: string };
  if (typeof err.cause?.code === 'string') return err.cause.code;
  if (typeof err.code === 'string') return err.code;
  return err.message ?? String(e);
}

/** Runs the SIGTERM scenario; never throws for a failed request (they are counted). */
export async function runSigtermDrain(opts: SigtermOptions = {}): Promise<SigtermResult> {
  const rounds = opts.rounds ?? 1;
  const clients = opts.clients ?? 16;
  const warmMs = opts.warmMs ?? 800;
  const drainTimeoutMs = opts.drainTimeoutMs ?? 5000;
  const fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
  const dir = await mkdtemp(join(tmpdir(), 'sluice-sigterm-'));
  const agent = new Agent({ keepAliveTimeout: 10_000, connections: clients });
  const result: SigtermResult = {
    rounds: [],
    drainTimeoutMs,
    ok: 0,
    retries: 0,
    failures: {},
    acceptResets: 0,
    streamsOk: 0,
    streamsFailed: 0,
  };
  const fail = (what: string): void => {
    result.failures[what] = (result.failures[what] ?? 0) + 1;
  };
  let sluice: Child | null = null;
  let stop = false;
  let loops: Promise<void>[] = [];
  try {
    const port = await freePort();
    const admin = await freePort();
    const file = join(dir, 'sluice.yaml');
    await writeFile(
      file,
      `listeners:\n  - name: public\n    address: 127.0.0.1\n    port: ${port}\nadmin:\n  address: 127.0.0.1\n  port: ${admin}\nserver:\n  drain_timeout_ms: ${drainTimeoutMs}\npools:\n  - name: gpu\n    nodes:\n${fleet.urls.map((u) => `      - url: ${u}`).join('\n')}\nroutes:\n  - name: all\n    match: {}\n    pool: gpu\n`,
    );
    const url = `http://127.0.0.1:${port}/v1/chat/completions`;
    const start = (): Promise<Child> => serveChild(file);
    /** One request, retried while the connection is refused. */
    const send = async (keepAlive: boolean, body: string): Promise<string | null> => {
      for (;;) {
        try {
          const r = await request(url, {
            method: 'POST',
            headers: keepAlive
              ? { 'content-type': 'application/json' }
              : { 'content-type': 'application/json', connection: 'close' },
            body,
            ...(keepAlive ? { dispatcher: agent } : { reset: true }),
          });
          const text = await r.body.text();
          if (r.statusCode === 200) return text;
          fail(`http_${r.statusCode}`);
          return null;
        } catch (e) {
          const code = errorCode(e);
          if (code === 'ECONNREFUSED' && !stop) {
            result.retries++;
            await new Promise((r) => setTimeout(r, 20));
            continue;
          }
          if (!keepAlive && code === 'ECONNRESET') result.acceptResets++;
          else fail(`${code}${keepAlive ? ' (keep-alive)' : ' (new connection)'}`);
          return null;
        }
      }
    };
    const fresh = Math.round(clients * (opts.newConnectionShare ?? 0));
    const loop = async (i: number): Promise<void> => {
      while (!stop) if ((await send(i >= fresh, BODY)) !== null) result.ok++;
    };
    sluice = await start();
    loops = Array.from({ length: clients }, (_, i) => loop(i));
    for (let round = 0; round < rounds; round++) {
      await new Promise((r) => setTimeout(r, warmMs));
      // Long streams (20 tokens, 25 ms apart) in flight when the signal arrives, on connections of
      // their own: a connection left idle in a client's pool when the drain ends is closed under it,
      // which is HTTP/1.1's own race (RFC 9112 §9.3.1), not a request Sluice accepted and lost.
      const streamAgent = new Agent({ connections: 4 });
      const streams = Array.from({ length: 4 }, () =>
        request(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-sim-chunk-delay-ms': '25' },
          body: STREAM_BODY,
          dispatcher: streamAgent,
        }).then(
          async (r) => {
            const text = await r.body.text();
            const whole =
              r.statusCode === 200 && text.trimEnd().endsWith('data: [DONE]') && !text.includes('"error"');
            if (whole) result.streamsOk++;
            else result.streamsFailed++;
          },
          () => void result.streamsFailed++,
        ),
      );
      await new Promise((r) => setTimeout(r, 100));
      const t0 = performance.now();
      const stopping = sluice;
      stopping.process.kill('SIGTERM');
      const code = await stopping.exited;
      result.rounds.push({
        exitCode: typeof code === 'number' ? code : null,
        exitMs: performance.now() - t0,
      });
      await Promise.all(streams);
      await streamAgent.close();
      sluice = await start();
    }
    await new Promise((r) => setTimeout(r, 200));
    stop = true;
    await Promise.all(loops);
  } finally {
    stop = true;
    await Promise.all(loops);
    if (sluice !== null) await stopChild(sluice);
    await agent.close();
    await fleet.close();
    await rm(dir, { recursive: true, force: true });
  }
  return result;
}
