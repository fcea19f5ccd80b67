/**
 * The proxy benchmark's baseline: the least a uWebSockets.js + undici forwarder does, with no
 * routing, checks or metrics. It copies the request head, buffers the body, `dispatch`es it on one
 * keep-alive Pool, and writes the answer back: a sized answer in one cork (head and body together),
 * an unsized one (SSE) chunk by chunk as it arrives, with backpressure. Whatever Sluice costs above
 * this is Sluice's own.
 */
import {
  App,
  us_listen_socket_close,
  us_socket_local_port,
  type HttpResponse,
  type us_listen_socket,
} from 'uWebSockets.js';
import { Pool, type Dispatcher } from 'undici';

/** How the forwarder runs. */
export interface BareForwarderOptions {
  /** Port on 127.0.0.1; 0 picks a free one. */
  port: number;
  /** Origin of the one upstream, `http://127.0.0.1:PORT`. */
  upstream: string;
  /** Keep-alive connections to the upstream (enough not to cap the benchmark's concurrency). */
  connections: number;
}

/** A running forwarder. */
export interface BareForwarder {
  readonly port: number;
  close(): Promise<void>;
}

/** Request headers that are not forwarded: hop-by-hop, or set by undici itself. */
const DROP_REQUEST = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'host',
  'content-length',
  'expect',
]);
/** Response headers that are not copied back: hop-by-hop, or written by uWS itself. */
const DROP_RESPONSE = new Set([
  'connection',
  'keep-alive',
  'transfer-encoding',
  'trailer',
  'upgrade',
  'content-length',
  'date',
  'uwebsockets',
]);

/** The undici controller methods used here. */
interface Controller {
  pause(): void;
  resume(): void;
  abort(reason: Error): void;
}

/** One request: the uWS side and the undici handler in one object of fixed shape. */
class Exchange implements Dispatcher.DispatchHandler {
  readonly res: HttpResponse;
  aborted = false;
  controller: Controller | null = null;
  status = 0;
  headers: Record<string, string | string[] | undefined> | null = null;
  /** True once the head went out (an unsized answer is streamed). */
  streaming = false;
  chunks: Buffer[] = [];

  constructor(res: HttpResponse) {
    this.res = res;
  }

  onRequestStart(controller: Controller): void {
    if (this.aborted) controller.abort(new Error('client aborted'));
    else this.controller = controller;
  }

  onResponseStart(
    controller: Controller,
    status: number,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    this.status = status;
    this.headers = headers;
    if (this.aborted || headers['content-length'] !== undefined) return;
    this.streaming = true;
    this.res.cork(() => this.writeHead());
  }

  onResponseData(controller: Controller, chunk: Buffer): void {
    if (this.aborted) return;
    if (!this.streaming) {
      this.chunks.push(chunk);
      return;
    }
    let ok = true;
    this.res.cork(() => {
      ok = this.res.write(chunk);
    });
    if (!ok) {
      controller.pause();
      this.res.onWritable(() => {
        controller.resume();
        return true;
      });
    }
  }

  onResponseEnd(): void {
    if (this.aborted) return;
    const res = this.res;
    if (this.streaming) {
      res.cork(() => res.end());
      return;
    }
    const c = this.chunks;
    const body = c.length === 1 ? c[0]! : Buffer.concat(c);
    res.cork(() => {
      this.writeHead();
      res.end(body);
    });
  }

  onResponseError(_controller: Controller, _err: Error): void {
    if (this.aborted) return;
    this.aborted = true;
    const res = this.res;
    res.cork(() => {
      if (this.streaming) res.close();
      else res.writeStatus('502 Bad Gateway').end('bad gateway');
    });
  }

  writeHead(): void {
    const res = this.res;
    res.writeStatus(String(this.status));
    const h = this.headers!;
    for (const name in h) {
      if (DROP_RESPONSE.has(name)) continue;
      const v = h[name];
      if (typeof v === 'string') res.writeHeader(name, v);
      else if (v !== undefined) for (const x of v) res.writeHeader(name, x);
    }
  }
}

/** Starts a forwarder; resolves once it listens. Rejects when the port cannot be bound. */
export async function startBareForwarder(options: BareForwarderOptions): Promise<BareForwarder> {
  const pool = new Pool(options.upstream, {
    connections: options.connections,
    pipelining: 1,
    keepAliveTimeout: 30_000,
    keepAliveMaxTimeout: 600_000,
  });
  const app = App().any('/*', (res, req) => {
    // The request object is valid only during this call: copy what is needed now.
    const method = req.getCaseSensitiveMethod();
    const q = req.getQuery() as string | undefined;
    const url = req.getUrl();
    const path = q === undefined || q === '' ? url : `${url}?${q}`;
    const headers: string[] = [];
    let hasBody = false;
    req.forEach((k, v) => {
      if (k === 'content-length') hasBody = v !== '0';
      else if (k === 'transfer-encoding') hasBody = true;
      if (!DROP_REQUEST.has(k)) headers.push(k, v);
    });
    const ex = new Exchange(res);
    res.onAborted(() => {
      ex.aborted = true;
      ex.controller?.abort(new Error('client aborted'));
    });
    if (!hasBody) {
      pool.dispatch({ method, path, headers, body: null }, ex);
      return;
    }
    let parts: Buffer[] | null = null;
    res.onData((ab, isLast) => {
      // uWS reuses the chunk's memory after this call: copy it.
      const chunk = Buffer.from(new Uint8Array(ab));
      if (!isLast) {
        (parts ??= []).push(chunk);
        return;
      }
      const body = parts === null ? chunk : Buffer.concat([...parts, chunk]);
      if (!ex.aborted) pool.dispatch({ method, path, headers, body }, ex);
    });
  });
  const socket = await new Promise<us_listen_socket | false>((resolve) =>
    app.listen('127.0.0.1', options.port, resolve),
  );
  if (socket === false) {
    await pool.close();
    throw new Error(`bare forwarder: cannot listen on 127.0.0.1:${options.port}`);
  }
  return {
    port: us_socket_local_port(socket),
    async close(): Promise<void> {
      us_listen_socket_close(socket);
      app.close();
      await pool.destroy();
    },
  };
}
