/**
 * The read-only view of a pool's health that the admin API serves: plain objects copied from the
 * live state, so a caller can serialize or keep them without touching the state itself.
 */
import type { CheckState } from './active-check.js';
import type { NodeHealth } from './node-health.js';
import { decayedEjectionCount } from './outlier-detector.js';

/** Active-check state of one node in a snapshot. */
export interface ActiveCheckSnapshot {
  state: CheckState;
  consecutiveFailures: number;
  consecutiveSuccesses: number;
  probes: number;
  failedProbes: number;
  lastError: string | null;
}

/** Scrape state of one node in a snapshot; gauges are -1 when not scraped or the last scrape failed. */
export interface ScrapeSnapshot {
  running: number;
  waiting: number;
  /** 0..1. */
  kvUsage: number;
  scrapes: number;
  failedScrapes: number;
  lastError: string | null;
}

/** One node's health as the admin API shows it. */
export interface NodeHealthSnapshot {
  /** The node's id (origin URL). */
  id: string;
  /** False while ejected or failing active checks. */
  available: boolean;
  ejected: boolean;
  /** End of the current ejection on the health clock, ms; -1 when not ejected. */
  ejectedUntilMs: number;
  /** Time left of the current ejection, ms; 0 when not ejected. */
  ejectedForMs: number;
  /** Past ejections still counted (after decay); the next ejection lasts (this + 1) × base. */
  ejectionCount: number;
  /** Failed attempts in a row from real traffic. */
  consecutiveFailures: number;
  lastFailure: string | null;
  /** null when active checks are off. */
  activeCheck: ActiveCheckSnapshot | null;
  /** Slow-start multiplier of the node's weight, (0..1]. */
  weightFactor: number;
  saturated: boolean;
  /** null when scraping is off. */
  scrape: ScrapeSnapshot | null;
}

/** A pool's health as the admin API shows it. */
export interface PoolHealthSnapshot {
  pool: string;
  /** Nodes ejected now. */
  ejected: number;
  /** Nodes out of rotation now (ejected or failing checks). */
  unavailable: number;
  nodes: NodeHealthSnapshot[];
}

/**
 * Copies `h` at time `nowMs` (health clock) into a snapshot; `decayMs` is the pool's
 * `ejectionDecayMs`, so the ejection count shown is the one the next ejection would use.
 */
export function snapshotNode(h: NodeHealth, nowMs: number, decayMs: number): NodeHealthSnapshot {
  const n = h.node;
  const c = h.checker;
  const s = h.scraper;
  return {
    id: n.id,
    available: n.available,
    ejected: h.ejected,
    ejectedUntilMs: h.ejected ? h.ejectedUntilMs : -1,
    ejectedForMs: h.ejected ? Math.max(0, h.ejectedUntilMs - nowMs) : 0,
    ejectionCount: h.ejected
      ? h.ejectionCount
      : decayedEjectionCount(h.ejectionCount, h.lastEjectionEndMs, nowMs, decayMs),
    consecutiveFailures: h.consecutiveFailures,
    lastFailure: h.lastFailure,
    activeCheck:
      c === null
        ? null
        : {
            state: c.state,
            consecutiveFailures: c.consecutiveFailures,
            consecutiveSuccesses: c.consecutiveSuccesses,
            probes: c.probes,
            failedProbes: c.failedProbes,
            lastError: c.lastError,
          },
    weightFactor: n.weightFactor,
    saturated: n.saturated,
    scrape:
      s === null
        ? null
        : {
            running: n.scrapedRunning,
            waiting: n.scrapedWaiting,
            kvUsage: n.scrapedKvUsage,
            scrapes: s.scrapes,
            failedScrapes: s.failedScrapes,
            lastError: s.lastError,
          },
  };
}
