/**
 * The downstream listeners: per configured listener either a uWS app (`pipelining: 0`) or Sluice's
 * own HTTP/1.1 server (`net-listener.ts`), both handing captured heads to the shared
 * `RequestIntake`; the connection cap on uWS listeners; and the graceful drain. The only module
 * that creates uWS apps.
 */
import './uws-env.js';
import {
  App,
  us_listen_socket_close,
  us_socket_local_port,
  type HttpRequest,
  type HttpResponse,
  type TemplatedApp,
  type us_listen_socket,
} from 'uWebSockets.js';
import type { ListenerConfig } from '../../config/types.js';
import type { Session, SessionHost } from '../lifecycle/session.js';
import type { LocalEndpoints } from '../lifecycle/local-endpoints.js';
import type { StatsRegistry } from '../metrics/stats.js';
import type { Plan } from '../plan/plan.js';
import { NetListener } from './net-listener.js';
import { captureHead } from './request-head.js';
import { ListenerRuntime, RequestIntake } from './request-intake.js';
import { UwsDownstream } from './uws-downstream.js';

/** A bound listener. */
export interface BoundListener {
  readonly name: string;
  readonly address: string;
  /** The port actually bound (differs from the config when it said 0). */
  readonly port: number;
}

interface ListenerState {
  rt: ListenerRuntime;
  /** The uWS app (`pipelining: 0`), or null. */
  app: TemplatedApp | null;
  /** Sluice's own HTTP/1.1 server (`pipelining` > 0), or null. */
  net: NetListener | null;
  socket: us_listen_socket | null;
  port: number;
}

export class ProxyServer implements SessionHost {
  readonly stats: StatsRegistry;
  draining = false;
  /** Endpoints Sluice answers itself (the batch API), or null. Set before `listen`. */
  endpoints: LocalEndpoints | null = null;
  private readonly intake: RequestIntake;
  private readonly listeners: ListenerState[] = [];
  private drained: (() => void) | null = null;

  /** `current` returns the plan new requests should run on. */
  constructor(stats: StatsRegistry, current: () => Plan) {
    this.stats = stats;
    this.intake = new RequestIntake(this, current);
  }

  /** Binds every listener; rejects with a clear message when a port cannot be bound. */
  async listen(configs: readonly ListenerConfig[]): Promise<BoundListener[]> {
    for (const config of configs) {
      const rt = new ListenerRuntime(config, this.stats.listener(config.name), this, this.listeners.length);
      if (config.pipelining > 0) {
        const net = new NetListener(rt, this.intake, this);
        const port = await net.listen();
        this.listeners.push({ rt, app: null, net, socket: null, port });
        continue;
      }
      const app = App();
      const state: ListenerState = { rt, app, net: null, socket: null, port: 0 };
      // uWS calls a filter on every connection open and close; with one registered, a test driving
      // two fleets through keep-alive connections lost over half its throughput, so connections
      // are counted only where a cap needs the count.
      if (config.max_connections > 0) app.filter((res, count) => countConnection(rt, res, count));
      else rt.stats.connectionsCounted = false;
      app.any('/*', (res, req) => this.onRequest(state, res, req));
      await new Promise<void>((resolve, reject) => {
        app.listen(config.address, config.port, (socket) => {
          if (!socket) {
            reject(
              new Error(
                `listener ${config.name}: cannot bind ${config.address}:${config.port} (address in use or not permitted)`,
              ),
            );
            return;
          }
          state.socket = socket;
          state.port = us_socket_local_port(socket);
          resolve();
        });
      });
      this.listeners.push(state);
    }
    return this.bound();
  }

  /** The listeners as bound. */
  bound(): BoundListener[] {
    return this.listeners.map((l) => ({
      name: l.rt.config.name,
      address: l.rt.config.address,
      port: l.port,
    }));
  }

  private onRequest(l: ListenerState, res: HttpResponse, req: HttpRequest): void {
    // HOT
    const remote = Buffer.from(res.getRemoteAddressAsText()).toString();
    const head = captureHead(req, remote);
    this.intake.admit(l.rt, head, new UwsDownstream(res, l.rt));
  }

  sessionDone(_s: Session): void {
    this.stats.inFlight--;
    if (this.drained !== null && this.stats.inFlight === 0) this.drained();
  }

  /**
   * Stops accepting connections, waits for in-flight requests up to `timeoutMs`, then closes every
   * connection. Resolves true when everything finished in time.
   */
  async drain(timeoutMs: number): Promise<boolean> {
    this.draining = true;
    for (const l of this.listeners) {
      if (l.socket !== null) us_listen_socket_close(l.socket);
      l.socket = null;
      l.net?.stopAccepting();
    }
    let clean = true;
    if (this.stats.inFlight > 0) {
      clean = await new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), timeoutMs);
        this.drained = () => {
          clearTimeout(timer);
          resolve(true);
        };
      });
    }
    this.drained = null;
    this.closeNow();
    return clean;
  }

  /** Closes listening sockets and every open connection immediately. */
  closeNow(): void {
    this.draining = true;
    for (const l of this.listeners) {
      if (l.socket !== null) us_listen_socket_close(l.socket);
      l.socket = null;
      l.app?.close();
      l.net?.closeNow();
    }
    this.listeners.length = 0;
  }
}

/**
 * Counts the connections of a uWS listener (`count` is 1 on open, -1 on close) and closes one at
 * once when `max_connections` are already open; uWS reports that close as -1 too.
 */
function countConnection(rt: ListenerRuntime, res: HttpResponse, count: number): void {
  const st = rt.stats;
  if (count < 0) {
    st.connections--;
    return;
  }
  st.connections++;
  const cap = rt.config.max_connections;
  if (cap > 0 && st.connections > cap) {
    st.refused++;
    res.close();
  }
}
