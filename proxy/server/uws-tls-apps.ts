/**
 * A uWS TLS listener whose certificate can be replaced without closing a connection. uWS cannot
 * change the certificate of a running SSL app, removing a server name while its connections live
 * crashes the process, and the port is bound exclusively (no second socket can join it, see
 * `proxy-server.ts`); so the listening socket belongs to an acceptor app that hands each accepted
 * socket, before any handshake, to a TLS child app. A new certificate is a new child; the old child keeps the connections it has until
 * they close, then is closed. The listening socket never closes.
 *
 * ```
 *   acceptor (SSLApp, listens) ──accepted fd──> child #2 (SSLApp, new cert)   new connections
 *                                               child #1 (SSLApp, old cert)   its connections until they end
 * ```
 *
 * The acceptor must itself be an SSL app: a plain acceptor handing sockets to SSL children
 * crashes uWS under load (measured: segmentation faults within seconds of new-connection traffic).
 */
import { SSLApp, type HttpResponse, type TemplatedApp } from 'uWebSockets.js';
import { nowMs } from '../lifecycle/clock.js';
import type { SwappableTls, TlsMaterial } from './tls-material.js';

/**
 * uWS's acceptor/child API, present in the native module but not in its typings: an app's
 * descriptor, and the children an acceptor hands accepted sockets to (round-robin).
 */
interface AcceptorApp extends TemplatedApp {
  getDescriptor(): unknown;
  addChildAppDescriptor(descriptor: unknown): void;
  removeChildAppDescriptor(descriptor: unknown): void;
}

/** One TLS child app and the connections it holds. */
interface Child {
  app: AcceptorApp;
  descriptor: unknown;
  open: number;
  retired: boolean;
  /** Monotonic time it was retired, ms. */
  retiredAt: number;
}

/**
 * How long a retired child stays open even without connections, ms. The acceptor hands accepted
 * sockets over asynchronously (through the loop); a socket accepted just before the swap may
 * still be on its way to the old child, and closing that child under it crashes uWS.
 */
const RETIRE_GRACE_MS = 2000;

/** A certificate ready to be swapped in (see `prepare`). */
export interface PreparedSwap {
  readonly material: TlsMaterial;
  readonly child: Child;
}

export class UwsTlsApps implements SwappableTls {
  /** The app that listens; it only accepts and hands sockets on (its certificate is never used). */
  readonly acceptor: TemplatedApp;
  /** The current certificate. */
  material: TlsMaterial;
  /** Certificate swaps since start. */
  swaps = 0;
  private current: Child;
  /** Children with an older certificate that still hold connections. */
  private readonly retired = new Set<Child>();
  private readonly setup: (app: TemplatedApp) => void;

  /**
   * `setup` registers the request handlers (and anything else per app) on each TLS child; it runs
   * for the first child and again for every swap. Throws when uWS cannot use the files (the
   * material is checked beforehand, so this means they changed in between).
   */
  constructor(material: TlsMaterial, setup: (app: TemplatedApp) => void) {
    this.setup = setup;
    this.material = material;
    this.acceptor = SSLApp({ cert_file_name: material.certFile, key_file_name: material.keyFile });
    this.current = this.child(material);
    (this.acceptor as AcceptorApp).addChildAppDescriptor(this.current.descriptor);
  }

  private child(m: TlsMaterial): Child {
    const app = SSLApp({ cert_file_name: m.certFile, key_file_name: m.keyFile }) as AcceptorApp;
    const c: Child = { app, descriptor: app.getDescriptor(), open: 0, retired: false, retiredAt: 0 };
    app.filter((_res: HttpResponse, count: number) => this.onConnection(c, count));
    this.setup(app);
    return c;
  }

  private onConnection(c: Child, count: number): void {
    c.open += count > 0 ? 1 : -1;
    // Closed outside uWS's callback: the last connection of a retired child is still being closed.
    if (c.retired && c.open <= 0) setImmediate(closeRetired, this, c);
  }

  /** Closes a retired child once it holds no connection and its grace period is over. */
  closeRetired(c: Child): void {
    if (!this.retired.has(c) || c.open > 0) return;
    const wait = c.retiredAt + RETIRE_GRACE_MS - nowMs();
    if (wait > 0) {
      setTimeout(closeRetired, wait, this, c).unref();
      return;
    }
    this.retired.delete(c);
    c.app.close();
  }

  /**
   * Builds the TLS child for `material` without serving with it yet; `commit` then swaps it in.
   * Throws (changing nothing) when uWS cannot load the files. Split in two so that a reload
   * touching several listeners swaps all of them or none.
   */
  prepare(material: TlsMaterial): PreparedSwap {
    return { material, child: this.child(material) };
  }

  /** Serves new connections with a prepared certificate; open connections keep theirs. */
  commit(p: PreparedSwap): void {
    const old = this.current;
    const acceptor = this.acceptor as AcceptorApp;
    acceptor.addChildAppDescriptor(p.child.descriptor);
    acceptor.removeChildAppDescriptor(old.descriptor);
    this.current = p.child;
    this.material = p.material;
    this.swaps++;
    old.retired = true;
    old.retiredAt = nowMs();
    this.retired.add(old);
    if (old.open <= 0) setImmediate(closeRetired, this, old);
  }

  /** Drops a prepared certificate that will not be used. */
  discard(p: PreparedSwap): void {
    p.child.app.close();
  }

  /** Connections held by children with an older certificate. */
  get retiredConnections(): number {
    let n = 0;
    for (const c of this.retired) n += c.open;
    return n;
  }

  /** Closes every app and connection. */
  close(): void {
    this.acceptor.close();
    this.current.app.close();
    for (const c of this.retired) c.app.close();
    this.retired.clear();
  }
}

function closeRetired(apps: UwsTlsApps, c: Child): void {
  apps.closeRetired(c);
}
