/**
 * Admission with `reserve_per_node` under `server.workers`: the reserve rests on which tenants are
 * active and what each holds, so one controller decides for every thread. A pool with a reserve is
 * admitted by the main thread's controller; a worker thread's requests to it are offered there by
 * message (the tenant, weight, priority, the time left to the deadline, the cost) and wait for the
 * answer (admitted, or rejected with the reason and the retry delay), and their release or
 * cancellation goes back the same way. One message each way per request, plus one at its end; the
 * order across threads is the main thread's queue's (priority classes and fair shares over all of
 * them), and the reserve holds exactly as with one thread.
 *
 * Worker side: `RemoteAdmission`, the worker pool's controller. Main side: `RemoteAdmissions`.
 */
import { AdmissionController } from '../admission/admission-controller.js';
import {
  AdmissionRejection,
  type AdmissionRejectReason,
  type AdmissionTicket,
  type OfferResult,
} from '../admission/admission-ticket.js';
import { nowMs } from '../lifecycle/clock.js';
import { RelayIds, relayKey } from './relay-wire.js';

/** A worker's request offered to the main thread's controller of `pool`. */
export interface AdmissionOffer {
  t: 'adm-offer';
  /** The worker's number for the request (unique among its requests in flight). */
  id: number;
  pool: string;
  tenant: string;
  weight: number;
  priority: number;
  /** Time left to the request's deadline, ms (Infinity: none): the threads' clocks differ. */
  deadlineInMs: number;
  cost: number;
}

/** The request `id` is over: its slot is freed (admitted) or it leaves the queue (waiting). */
export interface AdmissionEnd {
  t: 'adm-end';
  id: number;
  /** Its time holding the slot, ms, for the adaptive limit (-1 when it never had one). */
  latencyMs: number;
}

/** The main thread's answer to an offer. */
export type AdmissionAnswer =
  | { t: 'adm-admitted'; id: number }
  | { t: 'adm-rejected'; id: number; reason: AdmissionRejectReason; retryAfterMs: number };

/**
 * A worker pool's controller when the main thread admits its requests: every offer is queued here
 * until the main thread answers. The settings calls of a reload are the main thread's business.
 */
export class RemoteAdmission extends AdmissionController {
  private readonly client: AdmissionRelayClient;
  private readonly pool: string;

  constructor(client: AdmissionRelayClient, pool: string) {
    super({ timers: false });
    this.client = client;
    this.pool = pool;
  }

  override offer(t: AdmissionTicket): OfferResult {
    this.client.offer(this.pool, t);
    return 'queued';
  }

  override release(t: AdmissionTicket, latencyMs?: number): boolean {
    return this.client.end(t, latencyMs ?? nowMs() - t.slotSinceMs);
  }

  override cancel(t: AdmissionTicket): boolean {
    return this.client.end(t, -1);
  }

  override setQueueLimits(): void {}

  override setCapacity(): void {}

  override setServingNodes(): void {}
}

/** A worker's requests offered to the main thread, by number. */
export class AdmissionRelayClient {
  private readonly post: (m: AdmissionOffer | AdmissionEnd) => void;
  private readonly byId = new Map<number, AdmissionTicket>();
  private readonly ids = new Map<AdmissionTicket, number>();
  private readonly numbers = new RelayIds();

  constructor(post: (m: AdmissionOffer | AdmissionEnd) => void) {
    this.post = post;
  }

  /** Requests offered and not ended. */
  get pending(): number {
    return this.byId.size;
  }

  offer(pool: string, t: AdmissionTicket): void {
    const id = this.numbers.next();
    this.byId.set(id, t);
    this.ids.set(t, id);
    this.post({
      t: 'adm-offer',
      id,
      pool,
      tenant: t.tenant,
      weight: t.weight,
      priority: t.priority,
      deadlineInMs: t.deadlineMs - nowMs(),
      cost: t.cost,
    });
  }

  /** The request is over (released or cancelled): the main thread frees what it holds. */
  end(t: AdmissionTicket, latencyMs: number): boolean {
    const id = this.ids.get(t);
    if (id === undefined) return false;
    this.ids.delete(t);
    this.byId.delete(id);
    this.post({ t: 'adm-end', id, latencyMs });
    return true;
  }

  /** The main thread's answer. */
  answered(m: AdmissionAnswer): void {
    const t = this.byId.get(m.id);
    // Ended meanwhile (the client left): the main thread frees the slot on the end message.
    if (t === undefined) return;
    if (m.t === 'adm-admitted') {
      t.slotSinceMs = nowMs();
      t.onAdmitted();
      return;
    }
    this.byId.delete(m.id);
    this.ids.delete(t);
    t.onRejected(new AdmissionRejection(m.reason, m.retryAfterMs));
  }
}

/** A worker's request in the main thread's controller. */
class RemoteTicket implements AdmissionTicket {
  readonly tenant: string;
  readonly weight: number;
  readonly priority: number;
  readonly deadlineMs: number;
  readonly cost: number;
  slotSinceMs = -1;
  slotOwner: object | null = null;
  readonly id: number;
  readonly controller: AdmissionController | null;
  private readonly owner: RemoteAdmissions;
  private readonly send: (m: AdmissionAnswer) => void;

  constructor(
    owner: RemoteAdmissions,
    m: AdmissionOffer,
    controller: AdmissionController | null,
    send: (m: AdmissionAnswer) => void,
  ) {
    this.owner = owner;
    this.id = m.id;
    this.tenant = m.tenant;
    this.weight = m.weight;
    this.priority = m.priority;
    this.deadlineMs = nowMs() + m.deadlineInMs;
    this.cost = m.cost;
    this.controller = controller;
    this.send = send;
  }

  onAdmitted(): void {
    this.send({ t: 'adm-admitted', id: this.id });
  }

  onRejected(r: AdmissionRejection): void {
    this.owner.forget(this);
    this.send({ t: 'adm-rejected', id: this.id, reason: r.reason, retryAfterMs: r.retryAfterMs });
  }
}

/** The main thread's side: the workers' requests in its controllers, by worker and number. */
export class RemoteAdmissions {
  private readonly tickets = new Map<number, RemoteTicket>();
  private readonly workerOf = new Map<RemoteTicket, number>();

  /** Requests of worker threads offered here and not ended. */
  get size(): number {
    return this.tickets.size;
  }

  /**
   * Offers worker `index`'s request to `controller` (null: the pool has no admission here now, as
   * after a reload: admitted at once, holding nothing) and answers through `send`.
   */
  offer(
    index: number,
    m: AdmissionOffer,
    controller: AdmissionController | null,
    send: (a: AdmissionAnswer) => void,
  ): void {
    if (controller === null) {
      // The main thread's config has no admission for the pool (a reload removed it, the worker
      // has not applied that reload yet): as for a request of the new config, nothing to wait for.
      send({ t: 'adm-admitted', id: m.id });
      return;
    }
    const t = new RemoteTicket(this, m, controller, send);
    this.tickets.set(relayKey(index, m.id), t);
    this.workerOf.set(t, index);
    controller.holdRemote();
    const r = controller.offer(t);
    if (r === 'admitted') send({ t: 'adm-admitted', id: m.id });
    else if (r !== 'queued') {
      this.forget(t);
      send({ t: 'adm-rejected', id: m.id, reason: r.reason, retryAfterMs: r.retryAfterMs });
    }
  }

  /** Worker `index`'s request `id` ended: its slot is freed, or it leaves the queue. */
  end(index: number, id: number, latencyMs: number): void {
    const t = this.tickets.get(relayKey(index, id));
    if (t === undefined) return;
    this.forget(t);
    endTicket(t, latencyMs);
  }

  /**
   * Worker `index` died (or, with -1, every worker stopped): what its requests held or waited for
   * is given back. Returns how many.
   */
  workerDied(index: number): number {
    let n = 0;
    for (const [t, w] of [...this.workerOf]) {
      if (index >= 0 && w !== index) continue;
      this.forget(t);
      endTicket(t, -1);
      n++;
    }
    return n;
  }

  /** Takes `t` out of the maps; its controller no longer waits for it to close. */
  forget(t: RemoteTicket): void {
    const w = this.workerOf.get(t);
    if (w === undefined) return;
    this.workerOf.delete(t);
    this.tickets.delete(relayKey(w, t.id));
    t.controller!.letGoRemote();
  }
}

/**
 * Frees `t`'s slot in its controller, or takes it out of the queue. A request that ended while its
 * admission was on its way (`latencyMs` < 0) teaches the adaptive limit nothing (NaN: no sample).
 */
function endTicket(t: RemoteTicket, latencyMs: number): void {
  const c = t.controller!;
  if (t.slotOwner === c) c.release(t, latencyMs >= 0 ? latencyMs : NaN);
  else c.cancel(t);
}
