/**
 * The admission controller's counters (exported as `sluice_admission_*` metrics by whoever wires
 * them): admissions by path, releases, cancellations and rejections by reason. Plain numbers,
 * incremented on the request path; nothing here allocates.
 */
import { AdmissionRejectReason } from './admission-ticket.js';

/** Counters for metrics (`sluice_admission_*`). Monotonic. */
export interface AdmissionCounters {
  admittedImmediately: number;
  admittedFromQueue: number;
  queued: number;
  released: number;
  cancelled: number;
  rejectedQueueFull: number;
  rejectedEvicted: number;
  rejectedQueueTimeout: number;
  rejectedDeadline: number;
  rejectedClosed: number;
}

/** A zeroed counter set. */
export function newAdmissionCounters(): AdmissionCounters {
  return {
    admittedImmediately: 0,
    admittedFromQueue: 0,
    queued: 0,
    released: 0,
    cancelled: 0,
    rejectedQueueFull: 0,
    rejectedEvicted: 0,
    rejectedQueueTimeout: 0,
    rejectedDeadline: 0,
    rejectedClosed: 0,
  };
}

/** Counts one rejection under its reason. */
export function countRejection(c: AdmissionCounters, reason: AdmissionRejectReason): void {
  // HOT
  switch (reason) {
    case AdmissionRejectReason.queueFull:
      c.rejectedQueueFull++;
      break;
    case AdmissionRejectReason.evicted:
      c.rejectedEvicted++;
      break;
    case AdmissionRejectReason.queueTimeout:
      c.rejectedQueueTimeout++;
      break;
    case AdmissionRejectReason.deadline:
      c.rejectedDeadline++;
      break;
    case AdmissionRejectReason.closed:
      c.rejectedClosed++;
      break;
  }
}
