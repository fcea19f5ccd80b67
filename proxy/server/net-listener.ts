/**
 * A listener on Sluice's own HTTP/1.1 engine (`listeners[].pipelining` > 0): a `node:net` server,
 * or a `node:tls` one when the listener has a certificate (ALPN: `http/1.1` only), whose
 * connections (`net-connection.ts`) parse strictly and serve pipelined requests in order. It owns
 * the connection cap and one sweep timer that checks every connection's deadlines (head, body,
 * write), so no timer exists per request.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { createSecureContext, TLSSocket, type SecureContext, type TLSSocketOptions } from 'node:tls';
import type { SessionHost } from '../lifecycle/session.js';
import { nowMs } from '../lifecycle/clock.js';
import { NetConnection } from './net-connection.js';
import type { ListenerRuntime, RequestIntake } from './request-intake.js';
import { ALPN_PROTOCOLS, type SwappableTls, type TlsMaterial } from './tls-material.js';

/** The ALPN list every TLS connection offers, built once. */
const ALPN = [...ALPN_PROTOCOLS];

/** Shortest and longest interval of the deadline sweep, ms. */
const MIN_SWEEP_MS = 20;
const MAX_SWEEP_MS = 1000;

export class NetListener {
  private readonly rt: ListenerRuntime;
  private readonly intake: RequestIntake;
  private readonly host: SessionHost;
  private readonly server: Server;
  private readonly connections = new Set<NetConnection>();
  private sweepTimer: NodeJS.Timeout | null = null;
  /** The certificate side of a TLS listener, else null. */
  readonly tls: NetTls | null;
  private readonly forget = (c: NetConnection): void => {
    this.connections.delete(c);
    this.rt.stats.connections--;
    const all = this.rt.sharedConnections;
    if (all !== null) {
      Atomics.sub(all.cells, all.cell, 1);
      if (all.ledger) all.ledger[all.cell]!--;
    }
  };

  constructor(
    rt: ListenerRuntime,
    intake: RequestIntake,
    host: SessionHost,
    material: TlsMaterial | null = null,
  ) {
    this.rt = rt;
    this.intake = intake;
    this.host = host;
    // Half-open: a client may send its requests and FIN; the answers still go out.
    // A TLS listener accepts plain TCP too and wraps each counted socket itself (see onConnection).
    this.tls = material === null ? null : new NetTls(material, this.connections);
    this.server = createServer(
      { allowHalfOpen: true, highWaterMark: rt.config.write_buffer_bytes, noDelay: true },
      (socket) => this.onConnection(socket),
    );
  }

  /**
   * Binds the configured address and port; resolves to the bound port. `shared`: with
   * `SO_REUSEPORT` (`reusePort`, Node 22.12 and later), for the threads of `server.workers`, which
   * all bind the port the main thread checked free.
   */
  async listen(shared = false): Promise<number> {
    const cfg = this.rt.config;
    await new Promise<void>((resolve, reject) => {
      const fail = (err: Error): void =>
        reject(new Error(`listener ${cfg.name}: cannot bind ${cfg.address}:${cfg.port} (${err.message})`));
      this.server.once('error', fail);
      // `reusePort` is not in Node 20's typings; Node 22.12 and later read it.
      const options = { host: cfg.address, port: cfg.port, backlog: 1024, reusePort: shared };
      this.server.listen(options, () => {
        this.server.off('error', fail);
        resolve();
      });
    });
    const every = Math.min(cfg.header_timeout_ms, cfg.body_timeout_ms, cfg.write_timeout_ms) / 4;
    this.sweepTimer = setInterval(
      sweep,
      Math.max(MIN_SWEEP_MS, Math.min(MAX_SWEEP_MS, every)),
      this.connections,
    );
    this.sweepTimer.unref();
    const a = this.server.address();
    return typeof a === 'object' && a !== null ? a.port : 0;
  }

  private onConnection(socket: Socket): void {
    const st = this.rt.stats;
    const cap = this.rt.config.max_connections;
    // With worker threads the cap counts every thread's connections.
    const all = this.rt.sharedConnections;
    const open = all === null ? st.connections : Atomics.load(all.cells, all.cell);
    if ((cap > 0 && open >= cap) || this.host.draining) {
      st.refused++;
      socket.destroy();
      return;
    }
    if (all !== null && cap > 0 && Atomics.add(all.cells, all.cell, 1) >= cap) {
      // Another thread took the last place between the load and the add.
      Atomics.sub(all.cells, all.cell, 1);
      st.refused++;
      socket.destroy();
      return;
    }
    if (all !== null && all.ledger) all.ledger[all.cell]!++;
    st.connections++;
    const tls = this.tls;
    if (tls === null) {
      this.connections.add(new NetConnection(socket, this.rt, this.intake, this.host, this.forget));
      return;
    }
    // The cap and the drain apply at TCP accept, before a handshake costs anything. The handshake
    // then runs inside the connection's head deadline (`header_timeout_ms` from now covers it and
    // the first head together); a failed one errors the socket, which closes it. The TLS socket
    // gets the listener's write buffer size, as a plain one does (a `tls.Server` would leave it
    // at 16 KiB, arming the write deadline long before `write_buffer_bytes` are held).
    // `highWaterMark` is passed on to the socket's stream (Node's types omit it).
    const options: TLSSocketOptions & { highWaterMark: number } = {
      isServer: true,
      secureContext: tls.context,
      ALPNProtocols: ALPN,
      highWaterMark: this.rt.config.write_buffer_bytes,
    };
    const secure = new TLSSocket(socket, options);
    this.connections.add(
      new NetConnection(secure, this.rt, this.intake, this.host, this.forget, 'https', tls.generation),
    );
  }

  /** Stops accepting; idle connections close now, busy ones once their requests are answered. */
  stopAccepting(): void {
    this.server.close();
    for (const c of [...this.connections]) c.drain();
  }

  /** Closes the listening socket and every connection at once. */
  closeNow(): void {
    if (this.sweepTimer !== null) clearInterval(this.sweepTimer);
    this.sweepTimer = null;
    this.server.close();
    for (const c of [...this.connections]) c.socket.destroy();
  }
}

/** A prepared certificate of a TLS listener on this engine. */
interface PreparedNetTls {
  material: TlsMaterial;
  context: SecureContext;
}

/** The secure context of a checked certificate and key. Throws when OpenSSL cannot use them. */
function secureContextOf(m: TlsMaterial): SecureContext {
  return createSecureContext({ cert: m.cert, key: m.key });
}

/**
 * The certificate of a TLS listener on this engine. A swap replaces the secure context new
 * connections are wrapped with; open connections keep the one they were accepted with.
 */
export class NetTls implements SwappableTls {
  material: TlsMaterial;
  /** The context the next accepted connection handshakes with. */
  context: SecureContext;
  swaps = 0;
  /** Increases with each swap; a connection records the one it was accepted under. */
  generation = 0;
  private readonly connections: ReadonlySet<NetConnection>;

  constructor(material: TlsMaterial, connections: ReadonlySet<NetConnection>) {
    this.material = material;
    this.context = secureContextOf(material);
    this.connections = connections;
  }

  get retiredConnections(): number {
    let n = 0;
    for (const c of this.connections) if (c.tlsGeneration < this.generation) n++;
    return n;
  }

  prepare(material: TlsMaterial): PreparedNetTls {
    // Throws here, before anything changes, when OpenSSL cannot use the pair.
    return { material, context: secureContextOf(material) };
  }

  commit(prepared: object): void {
    const p = prepared as PreparedNetTls;
    this.context = p.context;
    this.material = p.material;
    this.generation++;
    this.swaps++;
  }

  discard(_prepared: object): void {
    // Nothing is held by a prepared secure context.
  }

  close(): void {
    // The listener closes the server and its connections.
  }
}

function sweep(connections: Set<NetConnection>): void {
  const now = nowMs();
  for (const c of connections) c.checkDeadlines(now);
}
