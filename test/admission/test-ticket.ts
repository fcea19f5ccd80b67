/**
 * Test helpers for admission: a ticket that records what happened to it, a manual clock and a
 * seeded random generator.
 */
import type { AdmissionRejection, AdmissionTicket } from '../../proxy/admission/admission-ticket.js';

export { ManualClock } from '../helpers/manual-clock.js';

let nextId = 0;

/** A ticket recording its callbacks; `log` (shared) receives `id` on each admission from the queue. */
export class TestTicket implements AdmissionTicket {
  readonly id: string;
  readonly tenant: string;
  readonly priority: number;
  readonly deadlineMs: number;
  readonly weight: number;
  readonly cost: number;
  slotSinceMs = -1;
  slotOwner: object | null = null;
  admittedCalls = 0;
  rejections: AdmissionRejection[] = [];
  log: string[] | null;

  constructor(
    tenant: string,
    opts: {
      priority?: number;
      deadlineMs?: number;
      weight?: number;
      cost?: number;
      log?: string[];
      id?: string;
    } = {},
  ) {
    this.id = opts.id ?? `${tenant}#${++nextId}`;
    this.tenant = tenant;
    this.priority = opts.priority ?? 0;
    this.deadlineMs = opts.deadlineMs ?? Infinity;
    this.weight = opts.weight ?? 1;
    this.cost = opts.cost ?? 1;
    this.log = opts.log ?? null;
  }

  onAdmitted(): void {
    this.admittedCalls++;
    this.log?.push(this.id);
  }

  onRejected(rejection: AdmissionRejection): void {
    this.rejections.push(rejection);
  }
}

/** Deterministic PRNG (mulberry32), so a failing sequence can be replayed from its seed. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
