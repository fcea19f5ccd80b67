/**
 * The small HTTP client of the health module: GET requests to nodes with a deadline, over its own
 * keep-alive agents (node:http / node:https, never the data path's undici pools), so probes neither
 * compete with nor warm the traffic connections. It never throws: every outcome is a `ProbeResult`.
 */
import {
  Agent as HttpAgent,
  request as httpRequest,
  type ClientRequest,
  type IncomingMessage,
} from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';

/** The outcome of one GET. */
export interface ProbeResult {
  /** HTTP status, or 0 when no complete response arrived. */
  status: number;
  /** The body (utf8) when it was asked for; '' otherwise. */
  body: string;
  /** Why the probe failed at the transport level (reset, refused, timeout, body too large); null if it did not. */
  error: string | null;
}

/** Sockets kept per node: one for checks and one for scrapes, so a slow scrape never delays a check. */
const SOCKETS_PER_NODE = 2;
/**
 * Idle keep-alive sockets are dropped after this, ms: below the usual 5 s server keep-alive
 * timeout, so a probe rarely reuses a socket the node is closing.
 */
const IDLE_SOCKET_MS = 4000;

function errorText(err: unknown): string {
  if (err instanceof Error) {
    const code = (err as NodeJS.ErrnoException).code;
    return code !== undefined && !err.message.includes(code) ? `${code} ${err.message}` : err.message;
  }
  return String(err);
}

function isStaleSocketError(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  return code === 'ECONNRESET' || code === 'EPIPE';
}

/** Keep-alive GET client shared by one pool's checkers and scrapers. */
export class ProbeClient {
  private http: HttpAgent | null = null;
  private https: HttpsAgent | null = null;
  private closed = false;

  /**
   * GETs `origin` + `path`. Resolves (never rejects) when a complete response arrived, the
   * transport failed, or `timeoutMs` passed. With `maxBodyBytes` 0 the body is discarded; otherwise
   * it is returned, and a longer body fails the probe. A request that failed on a reused keep-alive
   * socket (the node closed it while idle) is retried once on a fresh connection.
   */
  get(origin: string, path: string, timeoutMs: number, maxBodyBytes: number): Promise<ProbeResult> {
    return this.attempt(origin, path, timeoutMs, maxBodyBytes, true);
  }

  /** Destroys every socket; in-flight probes resolve as failed. Later calls fail at once. */
  close(): void {
    this.closed = true;
    this.http?.destroy();
    this.https?.destroy();
  }

  private attempt(
    origin: string,
    path: string,
    timeoutMs: number,
    maxBodyBytes: number,
    mayRetry: boolean,
  ): Promise<ProbeResult> {
    if (this.closed) return Promise.resolve({ status: 0, body: '', error: 'probe client closed' });
    const url = new URL(path, origin);
    const secure = url.protocol === 'https:';
    const options = {
      method: 'GET',
      // URL keeps the brackets of an IPv6 literal; node:http wants the bare address.
      host: url.hostname.replace(/^\[(.*)\]$/, '$1'),
      port: url.port,
      path: url.pathname + url.search,
      headers: { accept: maxBodyBytes > 0 ? 'text/plain' : '*/*', 'user-agent': 'sluice-health' },
    };
    return new Promise<ProbeResult>((resolve) => {
      let done = false;
      let req: ClientRequest;
      const finish = (r: ProbeResult): void => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        resolve(r);
      };
      const fail = (err: unknown): void => {
        if (done) return;
        if (mayRetry && req.reusedSocket && isStaleSocketError(err) && !this.closed) {
          done = true;
          clearTimeout(timer);
          resolve(this.attempt(origin, path, timeoutMs, maxBodyBytes, false));
          return;
        }
        finish({ status: 0, body: '', error: errorText(err) });
      };
      const onResponse = (res: IncomingMessage): void => {
        const status = res.statusCode ?? 0;
        if (maxBodyBytes === 0) {
          res.resume();
          res.on('end', () => finish({ status, body: '', error: null }));
        } else {
          const chunks: Buffer[] = [];
          let size = 0;
          res.on('data', (chunk: Buffer) => {
            size += chunk.length;
            if (size > maxBodyBytes) {
              res.destroy();
              finish({ status: 0, body: '', error: `body larger than ${maxBodyBytes} bytes` });
              return;
            }
            chunks.push(chunk);
          });
          res.on('end', () => finish({ status, body: Buffer.concat(chunks).toString('utf8'), error: null }));
        }
        res.on('error', fail);
        res.on('close', () => fail(new Error('response closed before its end')));
      };
      if (secure) {
        this.https ??= new HttpsAgent({
          keepAlive: true,
          maxSockets: SOCKETS_PER_NODE,
          maxFreeSockets: SOCKETS_PER_NODE,
          timeout: IDLE_SOCKET_MS,
        });
        req = httpsRequest({ ...options, agent: this.https }, onResponse);
      } else {
        this.http ??= new HttpAgent({
          keepAlive: true,
          maxSockets: SOCKETS_PER_NODE,
          maxFreeSockets: SOCKETS_PER_NODE,
          timeout: IDLE_SOCKET_MS,
        });
        req = httpRequest({ ...options, agent: this.http }, onResponse);
      }
      req.on('error', fail);
      const timer = setTimeout(() => {
        fail(new Error(`timed out after ${timeoutMs} ms`));
        req.destroy();
      }, timeoutMs);
      timer.unref();
      req.end();
    });
  }
}
