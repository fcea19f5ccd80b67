/**
 * Raw-socket exchanges for the fuzzers that talk to a running Sluice: its config (one listener per
 * downstream engine), sending bytes on a new connection and collecting what comes back, and
 * reading that back as HTTP/1.1 responses. Test support only; it judges responses, it never
 * builds them.
 */
import { connect } from 'node:net';
import { BrokenNode } from '../../loadtest/chaos/broken-node.js';
import { startTestSluice, type TestSluice } from '../helpers/sluice.js';

/** A running Sluice with one listener per engine in front of one recording node. */
export interface TwoEngineTarget {
  /** The node: it records every request it receives. */
  node: BrokenNode;
  t: TestSluice;
  /** Base URLs of the listeners: [0] the uWS engine, [1] the own engine. */
  urls: string[];
  /** Stops Sluice, then the node. */
  close(): Promise<void>;
}

/** Starts a node and a Sluice with `twoEngineConfig` in front of it; stops the node if Sluice fails. */
export async function startTwoEngineTarget(): Promise<TwoEngineTarget> {
  const node = await BrokenNode.start();
  let t: TestSluice;
  try {
    t = await startTestSluice(twoEngineConfig(node.url));
  } catch (e) {
    await node.close();
    throw e;
  }
  const urls = t.sluice.listeners.map((l) => `http://127.0.0.1:${l.port}`);
  const close = async (): Promise<void> => {
    await t.close();
    await node.close();
  };
  return { node, t, urls, close };
}

/**
 * A Sluice config with two listeners in front of the node at `nodeUrl`: `uws` (the uWS engine)
 * first, then `own` (the own HTTP/1.1 engine, pipelining 4, 1 s head and body deadlines).
 */
export function twoEngineConfig(nodeUrl: string): string {
  return `listeners:
  - name: uws
    address: 127.0.0.1
    port: 0
  - name: own
    address: 127.0.0.1
    port: 0
    pipelining: 4
    header_timeout_ms: 1000
    body_timeout_ms: 1000
admin:
  address: 127.0.0.1
  port: 0
pools:
  - name: gpu
    timeouts: { ttfb_ms: 2000, idle_ms: 2000 }
    nodes:
      - url: ${nodeUrl}
routes:
  - name: all
    match: {}
    pool: gpu
`;
}

/** What came back on one connection. */
export interface Exchanged {
  /** Every byte received. */
  data: Buffer;
  /** True when Sluice closed the connection within the bound. */
  closed: boolean;
}

/** How `exchange` sends and how long it waits. */
export interface ExchangeOptions {
  /**
   * Half-close the connection (the client sends nothing more): right after the bytes (`true`), or
   * once the first bytes of an answer came back or `HALF_CLOSE_WAIT_MS` passed without any
   * (`'after-answer'`). Sluice abandons a request whose answer has not started at the client's
   * half-close, so only the second way sees the answers of valid requests.
   */
  halfClose: boolean | 'after-answer';
  /** Longest wait for the close, ms. */
  boundMs: number;
  /**
   * Stop waiting after this long when not a byte came back, ms (an engine that stays silent); the
   * connection is then destroyed and `closed` is false. Default: wait the whole bound.
   */
  silenceMs?: number;
}

/** How long an `'after-answer'` exchange waits for the first answer bytes before half-closing, ms. */
export const HALF_CLOSE_WAIT_MS = 100;

/**
 * Sends `bytes` to `url`'s host and port on a new connection and resolves with what came back
 * once Sluice closed it, or after the bound (or the silence window) with `closed` false.
 */
export function exchange(url: string, bytes: Buffer, o: ExchangeOptions): Promise<Exchanged> {
  return new Promise((resolve) => {
    const u = new URL(url);
    const s = connect({ host: u.hostname, port: Number(u.port) });
    const parts: Buffer[] = [];
    let silence: NodeJS.Timeout | null = null;
    let halfClose: NodeJS.Timeout | null = null;
    const endNow = (): void => {
      if (halfClose !== null) clearTimeout(halfClose);
      halfClose = null;
      if (!s.writableEnded) s.end();
    };
    const giveUp = (): void => {
      clearTimeout(timer);
      if (silence !== null) clearTimeout(silence);
      if (halfClose !== null) clearTimeout(halfClose);
      s.destroy();
      resolve({ data: Buffer.concat(parts), closed: false });
    };
    const timer = setTimeout(giveUp, o.boundMs);
    s.on('data', (d: Buffer) => {
      parts.push(d);
      if (o.halfClose === 'after-answer') endNow();
      if (silence !== null) clearTimeout(silence);
      silence = null;
    });
    s.on('error', () => undefined);
    s.on('close', () => {
      clearTimeout(timer);
      if (silence !== null) clearTimeout(silence);
      if (halfClose !== null) clearTimeout(halfClose);
      resolve({ data: Buffer.concat(parts), closed: true });
    });
    s.on('connect', () => {
      if (o.halfClose === true) s.end(bytes);
      else s.write(bytes);
      if (o.halfClose === 'after-answer') halfClose = setTimeout(endNow, HALF_CLOSE_WAIT_MS);
      if (o.silenceMs !== undefined) silence = setTimeout(giveUp, o.silenceMs);
    });
  });
}

/** The responses read from a connection's bytes. */
export interface ReadResponses {
  /** Status code of each response head, in order. */
  statuses: number[];
  /** Why the bytes are not well-formed HTTP/1.1 responses, or null. */
  problem: string | null;
}

const STATUS_LINE = /^HTTP\/1\.1 ([1-5]\d\d) [^\r\n]*$/;
const FIELD = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*([^\r\n]*?)[ \t]*$/;

/**
 * Reads `data` as a sequence of HTTP/1.1 responses, the last of which may be cut or delimited by
 * the close (a truncated answer is well-formed; garbage is not).
 */
export function readResponses(data: Buffer): ReadResponses {
  const statuses: number[] = [];
  const fail = (problem: string): ReadResponses => ({ statuses, problem });
  let at = 0;
  while (at < data.length) {
    const end = data.indexOf('\r\n\r\n', at);
    if (end < 0)
      return fail(
        `a response head never ends: ${JSON.stringify(data.subarray(at, at + 80).toString('latin1'))}`,
      );
    const lines = data.subarray(at, end).toString('latin1').split('\r\n');
    const status = STATUS_LINE.exec(lines[0]!);
    if (status === null) return fail(`bad status line ${JSON.stringify(lines[0])}`);
    const code = Number(status[1]);
    statuses.push(code);
    let length = -1;
    let chunked = false;
    for (const line of lines.slice(1)) {
      const f = FIELD.exec(line);
      if (f === null) return fail(`bad header line ${JSON.stringify(line)}`);
      const name = f[1]!.toLowerCase();
      if (name === 'content-length') {
        if (length >= 0 || !/^\d+$/.test(f[2]!))
          return fail(`bad or repeated content-length ${JSON.stringify(f[2])}`);
        length = Number(f[2]);
      }
      if (name === 'transfer-encoding') chunked = f[2]!.toLowerCase() === 'chunked';
    }
    if (chunked && length >= 0) return fail('both content-length and chunked');
    at = end + 4;
    if (code < 200 || code === 204 || code === 304) continue;
    if (chunked) {
      for (;;) {
        const le = data.indexOf('\r\n', at);
        if (le < 0) return fail('a chunk size line never ends');
        const size = data.subarray(at, le).toString('latin1');
        if (!/^[0-9a-fA-F]+$/.test(size)) return fail(`bad chunk size ${JSON.stringify(size)}`);
        const n = parseInt(size, 16);
        at = le + 2 + n;
        if (data.subarray(at, at + 2).toString('latin1') !== '\r\n') {
          // A cut stream (the node or the client went away) ends here: allowed at the end only.
          return at >= data.length ? { statuses, problem: null } : fail('chunk data not followed by CRLF');
        }
        at += 2;
        if (n === 0) break;
      }
    } else if (length >= 0) {
      if (data.length < at + length) return { statuses, problem: null }; // cut by the close
      at += length;
    } else at = data.length; // close-delimited
  }
  return { statuses, problem: null };
}
