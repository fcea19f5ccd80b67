/**
 * A raw HTTP/1.1 client over `node:net` for tests that must send what no HTTP client would (repeated
 * or conflicting framing headers) or observe the connection itself (closed by the server or not).
 * It parses just enough of a response to test a proxy: status, headers, sized or chunked body.
 */
import { connect, type Socket } from 'node:net';

/** One parsed response. Header names are lower-case; repeated headers keep every value. */
export interface RawResponse {
  status: number;
  headers: Map<string, string[]>;
  body: Buffer;
}

/** The first value of a header, or undefined. */
export function rawHeader(r: RawResponse, name: string): string | undefined {
  return r.headers.get(name.toLowerCase())?.[0];
}

/** A raw client connection. Bytes received are buffered until a response is read. */
export class RawConnection {
  readonly socket: Socket;
  /** True once the server ended or closed the connection. */
  closed = false;
  private buf = Buffer.alloc(0);
  private readonly waiters = new Set<() => void>();
  private readonly closedPromise: Promise<void>;

  private constructor(socket: Socket) {
    this.socket = socket;
    socket.on('data', (d: Buffer) => {
      this.buf = Buffer.concat([this.buf, d]);
      this.wake();
    });
    this.closedPromise = new Promise<void>((resolve) => {
      const done = (): void => {
        this.closed = true;
        this.wake();
        resolve();
      };
      socket.once('end', done);
      socket.once('close', done);
    });
    // A reset after the server replied is a close like any other for these tests.
    socket.on('error', () => undefined);
  }

  /**
   * Opens a connection to `url`'s host and port (`http://127.0.0.1:PORT`). `allowHalfOpen` keeps
   * the client's side writable after the server's FIN, as a client outside Node may write on.
   */
  static async open(url: string, allowHalfOpen = false): Promise<RawConnection> {
    const u = new URL(url);
    const socket = connect({ host: u.hostname, port: Number(u.port), allowHalfOpen });
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    return new RawConnection(socket);
  }

  /** Writes bytes (a string is sent as latin1, so every char is one byte). */
  async write(data: string | Buffer): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.socket.write(typeof data === 'string' ? Buffer.from(data, 'latin1') : data, (err) =>
        err ? reject(err) : resolve(),
      );
    });
  }

  /** Bytes received and not consumed by `readResponse`. */
  get pending(): Buffer {
    return this.buf;
  }

  /**
   * Reads the next complete response. Rejects when the connection closes first or `timeoutMs`
   * passes. A response without Content-Length or chunked framing is read until the close.
   * `noBody` (the answer to a HEAD): the head only, whatever its framing headers say.
   */
  async readResponse(timeoutMs = 5000, noBody = false): Promise<RawResponse> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const parsed = parseResponse(this.buf, this.closed, noBody);
      if (parsed !== null) {
        this.buf = this.buf.subarray(parsed.consumed);
        return parsed.response;
      }
      if (this.closed)
        throw new Error(
          `connection closed before a complete response; received ${JSON.stringify(this.buf.toString('latin1'))}`,
        );
      await this.waitForData(deadline - Date.now());
    }
  }

  /** Resolves once the bytes received and not consumed hold `text`; rejects after `timeoutMs`. */
  async waitForText(text: string, timeoutMs = 5000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!this.buf.includes(text)) await this.waitForData(deadline - Date.now());
  }

  /** Resolves when more bytes arrive or the connection closes; rejects after `ms`. */
  async waitForData(ms: number): Promise<void> {
    if (ms <= 0) throw new Error('timed out waiting for the server');
    await new Promise<void>((resolve, reject) => {
      const wake = (): void => {
        clearTimeout(timer);
        this.waiters.delete(wake);
        resolve();
      };
      const timer = setTimeout(() => {
        this.waiters.delete(wake);
        reject(new Error('timed out waiting for the server'));
      }, ms);
      this.waiters.add(wake);
    });
  }

  /** Resolves true when the server ends or closes the connection within `timeoutMs`, else false. */
  async waitClosed(timeoutMs = 2000): Promise<boolean> {
    if (this.closed) return true;
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), timeoutMs);
    });
    const result = await Promise.race([this.closedPromise.then(() => true), timedOut]);
    clearTimeout(timer);
    return result;
  }

  /** Closes the connection from the client side (a client abort). */
  destroy(): void {
    this.socket.destroy();
  }

  private wake(): void {
    for (const w of [...this.waiters]) w();
  }
}

/** Sends `request` on a new connection and reads one response; returns it with the connection. */
export async function rawRequest(
  url: string,
  request: string | Buffer,
  timeoutMs = 5000,
): Promise<{ response: RawResponse; conn: RawConnection }> {
  const conn = await RawConnection.open(url);
  await conn.write(request);
  const response = await conn.readResponse(timeoutMs);
  return { response, conn };
}

function parseResponse(
  buf: Buffer,
  closed: boolean,
  noBody = false,
): { response: RawResponse; consumed: number } | null {
  const headEnd = buf.indexOf('\r\n\r\n');
  if (headEnd < 0) return null;
  const lines = buf.subarray(0, headEnd).toString('latin1').split('\r\n');
  const statusMatch = /^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? '');
  if (statusMatch === null) throw new Error(`not an HTTP response: ${JSON.stringify(lines[0])}`);
  const headers = new Map<string, string[]>();
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(':');
    if (colon < 0) continue;
    const name = line.slice(0, colon).trim().toLowerCase();
    const list = headers.get(name) ?? [];
    list.push(line.slice(colon + 1).trim());
    headers.set(name, list);
  }
  const status = Number(statusMatch[1]);
  const bodyStart = headEnd + 4;
  const te = headers.get('transfer-encoding')?.join(',').toLowerCase() ?? '';
  const cl = headers.get('content-length')?.[0];
  if (noBody || status === 204 || status === 304 || (status >= 100 && status < 200)) {
    return { response: { status, headers, body: Buffer.alloc(0) }, consumed: bodyStart };
  }
  if (te.includes('chunked')) {
    const parts: Buffer[] = [];
    let at = bodyStart;
    for (;;) {
      const lineEnd = buf.indexOf('\r\n', at);
      if (lineEnd < 0) return null;
      const size = parseInt(buf.subarray(at, lineEnd).toString('latin1'), 16);
      if (!Number.isFinite(size)) throw new Error('bad chunk size in response');
      if (size === 0) {
        const end = buf.indexOf('\r\n\r\n', lineEnd);
        if (end < 0 && buf.length < lineEnd + 4) return null;
        const consumed = end < 0 ? lineEnd + 4 : end + 4;
        return { response: { status, headers, body: Buffer.concat(parts) }, consumed };
      }
      if (buf.length < lineEnd + 2 + size + 2) return null;
      parts.push(buf.subarray(lineEnd + 2, lineEnd + 2 + size));
      at = lineEnd + 2 + size + 2;
    }
  }
  if (cl !== undefined) {
    const n = Number(cl);
    if (buf.length < bodyStart + n) return null;
    return {
      response: { status, headers, body: Buffer.from(buf.subarray(bodyStart, bodyStart + n)) },
      consumed: bodyStart + n,
    };
  }
  if (!closed) return null;
  return { response: { status, headers, body: Buffer.from(buf.subarray(bodyStart)) }, consumed: buf.length };
}
