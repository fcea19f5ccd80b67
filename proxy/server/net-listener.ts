/**
 * A listener on Sluice's own HTTP/1.1 engine (`listeners[].pipelining` > 0): a `node:net` server
 * whose connections (`net-connection.ts`) parse strictly and serve pipelined requests in order. It
 * owns the connection cap and one sweep timer that checks every connection's deadlines (head,
 * body, write), so no timer exists per request.
 */
import { createServer, type Server, type Socket } from 'node:net';
import type { SessionHost } from '../lifecycle/session.js';
import { nowMs } from '../lifecycle/clock.js';
import { NetConnection } from './net-connection.js';
import type { ListenerRuntime, RequestIntake } from './request-intake.js';

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
  private readonly forget = (c: NetConnection): void => {
    this.connections.delete(c);
    this.rt.stats.connections--;
  };

  constructor(rt: ListenerRuntime, intake: RequestIntake, host: SessionHost) {
    this.rt = rt;
    this.intake = intake;
    this.host = host;
    // Half-open: a client may send its requests and FIN; the answers still go out.
    this.server = createServer(
      { allowHalfOpen: true, highWaterMark: rt.config.write_buffer_bytes, noDelay: true },
      (socket) => this.onConnection(socket),
    );
  }

  /** Binds the configured address and port; resolves to the bound port. */
  async listen(): Promise<number> {
    const cfg = this.rt.config;
    await new Promise<void>((resolve, reject) => {
      const fail = (err: Error): void =>
        reject(new Error(`listener ${cfg.name}: cannot bind ${cfg.address}:${cfg.port} (${err.message})`));
      this.server.once('error', fail);
      this.server.listen({ host: cfg.address, port: cfg.port, backlog: 1024 }, () => {
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
    if ((cap > 0 && st.connections >= cap) || this.host.draining) {
      st.refused++;
      socket.destroy();
      return;
    }
    st.connections++;
    this.connections.add(new NetConnection(socket, this.rt, this.intake, this.host, this.forget));
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

function sweep(connections: Set<NetConnection>): void {
  const now = nowMs();
  for (const c of connections) c.checkDeadlines(now);
}
