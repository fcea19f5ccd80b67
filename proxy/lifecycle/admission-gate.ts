/**
 * A request's place in its pool's admission queue: the AdmissionTicket the controller holds
 * (tenant, weight, priority, deadline, fair-queuing cost) and the way back to the session when a
 * queued request gets its slot or is dropped. Created only for pools with admission control.
 */
import type { AdmissionController } from '../admission/admission-controller.js';
import type { AdmissionRejection, AdmissionTicket } from '../admission/admission-ticket.js';

/** What the gate reports to. The Session implements it. */
export interface GateOwner {
  onAdmitted(): void;
  onAdmissionRejected(rejection: AdmissionRejection): void;
}

const WAITING = 0;
const ADMITTED = 1;
const DONE = 2;

export class AdmissionGate implements AdmissionTicket {
  readonly owner: GateOwner;
  readonly controller: AdmissionController;
  readonly tenant: string;
  readonly weight: number;
  readonly priority: number;
  readonly deadlineMs: number;
  readonly cost: number;
  /** When the request was offered to the controller, monotonic ms. */
  readonly offeredAtMs: number;
  /** When the slot was granted, monotonic ms, set by the controller (kept after release); -1 before. */
  slotSinceMs = -1;
  slotOwner: object | null = null;
  private state = WAITING;

  constructor(
    owner: GateOwner,
    controller: AdmissionController,
    tenant: string,
    weight: number,
    priority: number,
    deadlineMs: number,
    cost: number,
    offeredAtMs: number,
  ) {
    this.owner = owner;
    this.controller = controller;
    this.tenant = tenant;
    this.weight = weight;
    this.priority = priority;
    this.deadlineMs = deadlineMs;
    this.cost = cost;
    this.offeredAtMs = offeredAtMs;
  }

  /** Time waited for a slot: until admitted, or until `nowMs` when never admitted, ms. */
  waitedMs(nowMs: number): number {
    return (this.slotSinceMs >= 0 ? this.slotSinceMs : nowMs) - this.offeredAtMs;
  }

  /** Marks the gate admitted (by `offer` itself or later from the queue). */
  admit(): void {
    this.state = ADMITTED;
  }

  onAdmitted(): void {
    if (this.state !== WAITING) return;
    this.owner.onAdmitted();
  }

  onRejected(rejection: AdmissionRejection): void {
    if (this.state !== WAITING) return;
    this.state = DONE;
    this.owner.onAdmissionRejected(rejection);
  }

  /** The request is over: frees its slot, or leaves the queue if it was still waiting. */
  close(nowMs: number): void {
    if (this.state === ADMITTED) this.controller.release(this, nowMs - this.slotSinceMs);
    else if (this.state === WAITING) this.controller.cancel(this);
    this.state = DONE;
  }
}
