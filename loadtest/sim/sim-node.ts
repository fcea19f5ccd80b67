/**
 * One simulated inference node: a `node:http` server on its own port that routes OpenAI, health,
 * metrics, debug and control requests, holds the fault state (crash included), and owns the node's
 * engine and counters. Inference requests go to `inference-handler.ts`; the latency model is the engine's.
 */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createHash } from 'node:crypto';
import type { Socket } from 'node:net';
import { nowMs } from '../../proxy/lifecycle/clock.js';
import { SimEngine, type EngineStats } from './engine.js';
import { FaultPatchError, NO_FAULTS, validateFaultPatch, type SimFaults } from './faults.js';
import { BodyTooLargeError, readBody, sendError, sendJson } from './http-io.js';
import { handleInference, type InferenceEndpoint, type InferenceHost } from './inference-handler.js';
import { renderMetrics } from './metrics.js';
import { NodeCounters } from './node-counters.js';
import { InvalidRequestError, parseJsonObject } from './openai-request.js';
import { modelsBody } from './openai-shapes.js';
import { SeededRandom } from './prng.js';
import type { SimProfile } from './profile.js';

/** How to start one node. */
export interface SimNodeOptions {
  /** A validated profile (see `resolveSimProfile`). */
  profile: SimProfile;
  /** Bind address. Default `127.0.0.1`. */
  address?: string;
  /** TCP port; 0 or undefined picks a free one. */
  port?: number;
  /** Relative GPU speed; modelled times are divided by it. Default 1. */
  speedFactor?: number;
  /** Position in its fleet; seeds the fault dice. Default 0. */
  index?: number;
}

/** A node's counters: the engine's, plus what the HTTP layer did with requests. */
export interface SimNodeStats extends EngineStats {
  /** Inference responses completed with 200. */
  served: number;
  /** Error replies injected (error_rate, x-sim-status). */
  injectedErrors: number;
  /** Connections destroyed on purpose (drop_rate, x-sim-drop-after, crash). */
  injectedDrops: number;
  /** Requests whose client went away first. */
  clientAborts: number;
  /** HTTP requests received, on any path (what a proxy in front let through). */
  received: number;
}

const INFERENCE_PATHS: Record<string, InferenceEndpoint> = {
  '/v1/chat/completions': 'chat',
  '/v1/completions': 'completion',
  '/v1/embeddings': 'embedding',
};

/** A running simulated node. Create with `startSimNode`. */
export class SimNode {
  /** `http://address:port`. */
  readonly url: string;
  /** The bound port. */
  readonly port: number;
  private faultState: SimFaults = { ...NO_FAULTS };
  private warmupEndsAt = 0; // monotonic ms
  private readonly engine: SimEngine;
  private readonly counters = new NodeCounters();
  private readonly host: InferenceHost;
  private readonly sockets = new Set<Socket>();
  private closing: Promise<void> | null = null;
  /** HTTP requests received, on any path. */
  private received = 0;

  /** Use `startSimNode`. */
  constructor(
    private readonly server: Server,
    readonly profile: SimProfile,
    readonly speedFactor: number,
    readonly index: number,
    address: string,
  ) {
    const bound = server.address();
    this.port = typeof bound === 'object' && bound !== null ? bound.port : 0;
    this.url = `http://${address.includes(':') ? `[${address}]` : address}:${this.port}`;
    this.engine = new SimEngine(profile, this.timeScale);
    this.host = {
      engine: this.engine,
      profile,
      counters: this.counters,
      currentFaults: () => this.faultState,
      faultRng: SeededRandom.fromText(`faults\u0000${index}`),
    };
    server.on('connection', (socket: Socket) => {
      this.sockets.add(socket);
      socket.once('close', () => this.sockets.delete(socket));
    });
    server.on('request', (req: IncomingMessage, res: ServerResponse) => {
      this.received++;
      this.handle(req, res).catch((err: unknown) => this.internalError(res, err));
    });
  }

  /** The current fault state (a copy). */
  faults(): SimFaults {
    return { ...this.faultState };
  }

  /**
   * Applies a partial fault update and returns the new state. `crash: true` destroys every open
   * connection and the engine's state; `crash: false` recovers, with a warm-up if `slow_start_ms` > 0.
   * Throws `FaultPatchError` for an invalid update.
   */
  setFaults(patch: Partial<SimFaults>): SimFaults {
    return this.applyFaults(validateFaultPatch(patch), undefined);
  }

  /** Counters and gauges now. */
  stats(): SimNodeStats {
    const c = this.counters;
    return {
      ...this.engine.stats(),
      served: c.served,
      injectedErrors: c.injectedErrors,
      injectedDrops: c.injectedDrops,
      clientAborts: c.clientAborts,
      received: this.received,
    };
  }

  /** Stops listening, destroys open connections, drops all work. Idempotent. */
  close(): Promise<void> {
    this.closing ??= new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      for (const s of this.sockets) s.destroy();
      this.engine.reset();
    });
    return this.closing;
  }

  /** time_scale × slowdown × warm-up ÷ speed factor, read by the engine at each step. */
  private readonly timeScale = (): number => {
    const f = this.faultState;
    let warm = 1;
    const left = this.warmupEndsAt - nowMs();
    if (left > 0 && f.slow_start_ms > 0) warm = 1 + ((f.slow_start_factor - 1) * left) / f.slow_start_ms;
    return (this.profile.time_scale * f.slowdown * warm) / this.speedFactor;
  };

  private applyFaults(patch: Partial<SimFaults>, keep: Socket | undefined): SimFaults {
    const wasCrashed = this.faultState.crash;
    this.faultState = { ...this.faultState, ...patch };
    const f = this.faultState;
    if (f.crash && !wasCrashed) {
      for (const s of this.sockets) if (s !== keep) s.destroy();
      this.engine.reset();
    }
    const recovered = wasCrashed && !f.crash;
    if ((recovered || patch.slow_start_ms !== undefined) && f.slow_start_ms > 0) {
      this.warmupEndsAt = nowMs() + f.slow_start_ms;
    }
    return this.faults();
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = req.url ?? '/';
    const q = url.indexOf('?');
    const path = q < 0 ? url : url.slice(0, q);
    if (this.faultState.crash && !path.startsWith('/control/')) {
      req.socket.destroy();
      return;
    }
    const method = req.method ?? 'GET';
    const endpoint = INFERENCE_PATHS[path];
    if (endpoint !== undefined) {
      if (method !== 'POST') return this.methodNotAllowed(req, res, 'POST');
      return handleInference(this.host, endpoint, req, res);
    }
    switch (path) {
      case '/health':
        if (method !== 'GET' && method !== 'HEAD') return this.methodNotAllowed(req, res, 'GET, HEAD');
        res.writeHead(this.faultState.unhealthy ? 503 : 200, { 'content-length': 0 }).end();
        return;
      case '/v1/models':
        if (method !== 'GET') return this.methodNotAllowed(req, res, 'GET');
        return sendJson(res, 200, modelsBody(this.profile, Math.floor(Date.now() / 1000)));
      case '/metrics': {
        if (method !== 'GET') return this.methodNotAllowed(req, res, 'GET');
        const text = renderMetrics(
          this.profile,
          this.engine.stats(),
          this.counters,
          this.faultState,
          this.speedFactor,
        );
        res.writeHead(200, { 'content-type': 'text/plain; version=0.0.4; charset=utf-8' }).end(text);
        return;
      }
      case '/debug/echo':
        return this.handleEcho(req, res);
      case '/control/faults':
        return this.handleControl(req, res, method);
      default:
        req.resume();
        return sendError(res, 404, `no route for ${path}`, 'not_found');
    }
  }

  private methodNotAllowed(req: IncomingMessage, res: ServerResponse, allow: string): void {
    req.resume();
    sendError(res, 405, `method ${req.method ?? ''} not allowed; use ${allow}`, 'method_not_allowed', {
      allow,
    });
  }

  /** The request body, or undefined after answering 413 (too large) or when the client went away. */
  private async bodyOf(req: IncomingMessage, res: ServerResponse): Promise<Buffer | undefined> {
    try {
      return await readBody(req);
    } catch (err) {
      if (err instanceof BodyTooLargeError)
        sendError(res, 413, err.message, 'request_too_large', { connection: 'close' });
      return undefined;
    }
  }

  private async handleEcho(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const body = await this.bodyOf(req, res);
    if (body === undefined) return;
    const headers: [string, string][] = [];
    for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) {
      headers.push([req.rawHeaders[i] as string, req.rawHeaders[i + 1] as string]);
    }
    sendJson(res, 200, {
      method: req.method,
      url: req.url,
      headers,
      body_length: body.length,
      body_sha256: createHash('sha256').update(body).digest('hex'),
    });
  }

  private async handleControl(req: IncomingMessage, res: ServerResponse, method: string): Promise<void> {
    if (method === 'GET') {
      req.resume();
      return sendJson(res, 200, this.faults());
    }
    if (method !== 'POST') return this.methodNotAllowed(req, res, 'GET, POST');
    const body = await this.bodyOf(req, res);
    if (body === undefined) return;
    let patch: Partial<SimFaults>;
    try {
      patch = validateFaultPatch(parseJsonObject(body));
    } catch (err) {
      if (err instanceof FaultPatchError || err instanceof InvalidRequestError) {
        return sendError(res, 400, err.message, 'invalid_fault');
      }
      throw err;
    }
    sendJson(res, 200, this.applyFaults(patch, req.socket));
  }

  private internalError(res: ServerResponse, err: unknown): void {
    if (res.headersSent) {
      res.destroy();
      return;
    }
    sendError(res, 500, `simulator bug: ${err instanceof Error ? err.message : String(err)}`, 'sim_internal');
  }
}

/** Starts a node listening on `address:port` (port 0 = a free one). Rejects if it cannot bind. */
export function startSimNode(opts: SimNodeOptions): Promise<SimNode> {
  const address = opts.address ?? '127.0.0.1';
  const speed = opts.speedFactor ?? 1;
  if (!(speed > 0) || !Number.isFinite(speed)) {
    return Promise.reject(new RangeError(`speed factor must be a positive number, got ${speed}`));
  }
  const server = createServer({ noDelay: true, requestTimeout: 0 });
  return new Promise<SimNode>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port ?? 0, address, () => {
      server.off('error', reject);
      resolve(new SimNode(server, opts.profile, speed, opts.index ?? 0, address));
    });
  });
}
