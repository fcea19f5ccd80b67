/**
 * The downstream listeners: per configured listener either a uWS app (`pipelining: 0`; for TLS,
 * the swappable apps of `uws-tls-apps.ts`) or Sluice's own HTTP/1.1 server (`net-listener.ts`),
 * both handing captured heads to the shared `RequestIntake`; the connection cap on uWS listeners;
 * certificate swaps; and the graceful drain. The only module that creates uWS apps.
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
import * as uws from 'uWebSockets.js';
import { createServer, type AddressInfo } from 'node:net';
import type { SharedTable } from '../runtime/shared-table.js';
import type { ListenerConfig } from '../../config/types.js';
import type { Session, SessionHost } from '../lifecycle/session.js';
import { LiveSessions } from './live-sessions.js';
import type { LocalEndpoints } from '../lifecycle/local-endpoints.js';
import type { StatsRegistry } from '../metrics/stats.js';
import type { Plan } from '../plan/plan.js';
import { nowMs } from '../lifecycle/clock.js';
import type { LoadShedder } from './load-shedder.js';
import { NetListener } from './net-listener.js';
import { captureHead } from './request-head.js';
import { ListenerRuntime, RequestIntake } from './request-intake.js';
import type { SwappableTls, TlsMaterial } from './tls-material.js';
import { UwsDownstream } from './uws-downstream.js';
import { UwsTlsApps } from './uws-tls-apps.js';

/** A bound listener. */
export interface BoundListener {
  readonly name: string;
  readonly address: string;
  /** The port actually bound (differs from the config when it said 0). */
  readonly port: number;
}

/**
 * uWS's listen option that binds without `SO_REUSEPORT`. uWS sets `SO_REUSEPORT` by default, so a
 * second process bound to the same port would silently take part of the traffic instead of failing
 * to start. The native module exports it, its typings do not; a build without it fails here, at
 * load, rather than falling back to a shared port.
 */
const LISTEN_EXCLUSIVE_PORT = exclusivePortOption();

function exclusivePortOption(): number {
  const v = (uws as unknown as { LIBUS_LISTEN_EXCLUSIVE_PORT?: unknown }).LIBUS_LISTEN_EXCLUSIVE_PORT;
  if (typeof v !== 'number')
    throw new Error(
      'uWebSockets.js does not export LIBUS_LISTEN_EXCLUSIVE_PORT: cannot bind a listener exclusively',
    );
  return v;
}

/** uWS's listen option that binds with `SO_REUSEPORT`: the listeners of `server.workers` threads. */
const LISTEN_SHARED_PORT = 0;

/** uWS's listen with a host and options: in the native module, not in its typings. */
interface ListenWithOptions {
  listen(
    host: string,
    port: number,
    options: number,
    cb: (socket: us_listen_socket | false) => void,
  ): TemplatedApp;
}

/** How long the replies to requests ended at the drain deadline get to leave before the close, ms. */
const CUT_FLUSH_MS = 100;

/** How long the drain waits with nothing in flight before it closes the connections, ms. */
const DRAIN_QUIET_MS = 250;

/** What the uWS request handler reads of its listener. */
interface ListenerView {
  rt: ListenerRuntime;
  /** `x-forwarded-proto` of its requests. */
  proto: string;
}

interface ListenerState extends ListenerView {
  /** The uWS app (`pipelining: 0`; a TLS listener's acceptor), or null. */
  app: TemplatedApp | null;
  /** The certificate side of an HTTPS listener (uWS child apps, or the own engine's context), else null. */
  tls: SwappableTls | null;
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
  /** The sessions in flight, for the drain deadline. */
  private readonly live = new LiveSessions();

  /** The worker threads' shared table (`server.workers` above 1), or null. */
  private readonly shared: SharedTable | null;

  /** `current` returns the plan new requests should run on. */
  constructor(stats: StatsRegistry, current: () => Plan, shared: SharedTable | null = null) {
    this.stats = stats;
    this.intake = new RequestIntake(this, current);
    this.shared = shared;
  }

  /** Overload protection, read once per request where it would become a session (RequestIntake). */
  set shedder(s: LoadShedder) {
    this.intake.shedder = s;
  }

  /**
   * Binds every listener; rejects with a clear message when a port cannot be bound. `tls` holds the
   * checked certificate of each listener that has a `tls` section, by listener name. `shared`: the
   * uWS listeners bind with `SO_REUSEPORT`, for the threads of `server.workers` (each thread binds
   * the same ports; the first checks that no other process holds them, `checkPortsFree`).
   */
  async listen(
    configs: readonly ListenerConfig[],
    tls: ReadonlyMap<string, TlsMaterial> = new Map(),
    shared = false,
  ): Promise<BoundListener[]> {
    for (const config of configs) {
      const rt = new ListenerRuntime(config, this.stats.listener(config.name), this, this.listeners.length);
      if (config.pipelining > 0) {
        if (shared && config.max_connections > 0 && this.shared !== null)
          rt.sharedConnections = this.shared.record('conn', config.name);
        const net = new NetListener(rt, this.intake, this, tls.get(config.name) ?? null);
        const port = await net.listen(shared);
        const proto = net.tls === null ? 'http' : 'https';
        this.listeners.push({ rt, proto, app: null, tls: net.tls, net, socket: null, port });
        continue;
      }
      const material = tls.get(config.name);
      const view: ListenerView = { rt, proto: material === undefined ? 'http' : 'https' };
      // uWS calls a filter on every connection open and close; with one registered, a test driving
      // two fleets through keep-alive connections lost over half its throughput, so connections
      // are counted only where a cap needs the count.
      const counted = config.max_connections > 0;
      if (!counted) rt.stats.connectionsCounted = false;
      else if (this.shared !== null) rt.sharedConnections = this.shared.record('conn', config.name);
      const handle = (a: TemplatedApp): void => {
        if (counted) a.filter((res, count) => countConnection(rt, res, count));
        a.any('/*', (res, req) => this.onRequest(view, res, req));
      };
      const tlsApps = material === undefined ? null : new UwsTlsApps(material, handle);
      const app = tlsApps?.acceptor ?? App();
      if (tlsApps === null) handle(app);
      const state: ListenerState = { ...view, app, tls: tlsApps, net: null, socket: null, port: 0 };
      // Held before binding, so that a failed bind still closes its apps (closeNow).
      this.listeners.push(state);
      await new Promise<void>((resolve, reject) => {
        // Exclusive: a port another process holds is a startup error (see LISTEN_EXCLUSIVE_PORT).
        (app as unknown as ListenWithOptions).listen(
          config.address,
          config.port,
          shared ? LISTEN_SHARED_PORT : LISTEN_EXCLUSIVE_PORT,
          (socket) => {
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
          },
        );
      });
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

  private onRequest(l: ListenerView, res: HttpResponse, req: HttpRequest): void {
    // HOT
    const remote = Buffer.from(res.getRemoteAddressAsText()).toString();
    const head = captureHead(req, remote, l.proto, l.rt.config.trust_forwarded);
    this.intake.admit(l.rt, head, new UwsDownstream(res, l.rt, head.method === 'HEAD'));
  }

  sessionStarted(s: Session): void {
    // HOT
    this.live.add(s);
  }

  sessionDone(s: Session): void {
    // HOT
    this.live.remove(s);
    this.stats.inFlight--;
    this.stats.served++;
    if (this.drained !== null && this.stats.inFlight === 0) this.drained();
  }

  /** Closes the listening sockets (once): new connections are refused from here on. */
  stopAccepting(): void {
    if (this.draining) return;
    this.draining = true;
    for (const l of this.listeners) {
      if (l.socket !== null) us_listen_socket_close(l.socket);
      l.socket = null;
      l.net?.stopAccepting();
    }
  }

  /**
   * Stops accepting connections, waits for in-flight requests up to `timeoutMs`, then closes every
   * connection. Requests still running at the deadline are ended first, each as Sluice ends a
   * request it gives up on (a 503 `server_shutting_down` before its head, an SSE error event or a
   * cut body after it), and their bytes get CUT_FLUSH_MS to leave. Resolves to the number of
   * requests so ended (0: everything finished in time).
   */
  async drain(timeoutMs: number): Promise<number> {
    this.stopAccepting();
    // Connections accepted just before the listening socket closed may still be sending their
    // request: closing them when the count first reaches zero would reset them. The drain ends
    // only after the count stayed at zero for DRAIN_QUIET_MS (or at the deadline).
    const deadline = nowMs() + timeoutMs;
    let clean = true;
    for (;;) {
      if (this.stats.inFlight > 0) {
        clean = await this.untilDrained(deadline - nowMs());
        if (!clean) break;
      }
      const quiet = Math.min(DRAIN_QUIET_MS, deadline - nowMs());
      if (quiet > 0) await new Promise((r) => setTimeout(r, quiet));
      if (this.stats.inFlight === 0 || nowMs() >= deadline) {
        clean = this.stats.inFlight === 0;
        break;
      }
    }
    this.drained = null;
    let cut = 0;
    if (!clean) {
      for (const s of this.live.snapshot()) {
        try {
          if (s.cutAtShutdown()) cut++;
        } catch {
          // One request that cannot be ended must not keep the others, or the close, waiting.
        }
      }
      await new Promise((r) => setTimeout(r, CUT_FLUSH_MS));
    }
    this.closeNow();
    return cut;
  }

  /** Resolves true when no request is in flight any more, false after `ms`. */
  private untilDrained(ms: number): Promise<boolean> {
    return new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => resolve(false), Math.max(0, ms));
      this.drained = () => {
        this.drained = null;
        clearTimeout(timer);
        resolve(true);
      };
    });
  }

  /**
   * Serves new connections of the TLS listeners named in `materials` with their new certificate;
   * open connections keep theirs. All or none: throws, changing nothing, when uWS cannot load one.
   */
  swapCertificates(materials: ReadonlyMap<string, TlsMaterial>): void {
    const prepared: [SwappableTls, object][] = [];
    try {
      for (const [name, m] of materials) {
        const apps = this.listeners.find((x) => x.rt.config.name === name)?.tls ?? null;
        if (apps === null) throw new Error(`listener ${name} does not serve TLS`);
        prepared.push([apps, apps.prepare(m)]);
      }
    } catch (e) {
      for (const [apps, p] of prepared) apps.discard(p);
      throw e;
    }
    for (const [apps, p] of prepared) apps.commit(p);
  }

  /** The TLS state of each HTTPS listener, for metrics. */
  tlsListeners(): { name: string; apps: SwappableTls }[] {
    const out: { name: string; apps: SwappableTls }[] = [];
    for (const l of this.listeners) if (l.tls !== null) out.push({ name: l.rt.config.name, apps: l.tls });
    return out;
  }

  /** Closes listening sockets and every open connection immediately. */
  closeNow(): void {
    this.draining = true;
    for (const l of this.listeners) {
      if (l.socket !== null) us_listen_socket_close(l.socket);
      l.socket = null;
      l.app?.close();
      l.tls?.close();
      l.net?.closeNow();
    }
    this.listeners.length = 0;
  }
}

/**
 * The listeners of `configs` with ports the threads of `server.workers` can all bind: each port
 * checked free by a bind without `SO_REUSEPORT` (which fails whenever any socket holds the port,
 * with or without it), so a port another process serves is a startup error, not a silent share of
 * its traffic; and port 0 replaced by the free port such a bind got (uWS binds port 0 without
 * `SO_REUSEPORT`, so the threads could not share it).
 */
export async function sharedListenerPorts(configs: readonly ListenerConfig[]): Promise<ListenerConfig[]> {
  const out: ListenerConfig[] = [];
  for (const c of configs) {
    const port = await new Promise<number>((resolve, reject) => {
      const probe = createServer();
      probe.once('error', () =>
        reject(
          new Error(
            `listener ${c.name}: cannot bind ${c.address}:${c.port} (address in use or not permitted)`,
          ),
        ),
      );
      probe.listen({ host: c.address, port: c.port, exclusive: true }, () => {
        const bound = (probe.address() as AddressInfo).port;
        probe.close(() => resolve(bound));
      });
    });
    out.push({ ...c, port });
  }
  return out;
}

/**
 * Counts the connections of a uWS listener (`count` is 1 on open, -1 on close) and closes one at
 * once when `max_connections` are already open; uWS reports that close as -1 too.
 */
function countConnection(rt: ListenerRuntime, res: HttpResponse, count: number): void {
  const st = rt.stats;
  const all = rt.sharedConnections;
  if (count < 0) {
    st.connections--;
    if (all !== null) {
      Atomics.sub(all.cells, all.cell, 1);
      if (all.ledger) all.ledger[all.cell]!--;
    }
    return;
  }
  st.connections++;
  // With worker threads the cap counts every thread's connections.
  let open = st.connections;
  if (all !== null) {
    open = Atomics.add(all.cells, all.cell, 1) + 1;
    if (all.ledger) all.ledger[all.cell]!++;
  }
  const cap = rt.config.max_connections;
  if (cap > 0 && open > cap) {
    st.refused++;
    res.close();
  }
}
