/**
 * The health state of one node as a member of one pool: the record `PoolHealth` keeps per node,
 * with one fixed shape (every field declared here) because the per-request `recordSuccess` /
 * `recordFailure` read and write it. It holds state only; the rules live in the detectors.
 */
import type { UpstreamNode } from '../upstream/upstream-node.js';
import type { ActiveChecker } from './active-check.js';
import type { MetricsScraper } from './metrics-scraper.js';

/** Health of one (pool, node). Times are on the pool's health clock (`options.now`), ms. */
export class NodeHealth {
  readonly node: UpstreamNode;
  /** True while out of rotation (ejected or failing active checks); `node.available` is its negation. */
  out = false;
  /** Failed attempts in a row from real traffic (passive signal); reset by a success. */
  consecutiveFailures = 0;
  /** Reason given with the last failed attempt; null before any. */
  lastFailure: string | null = null;
  /** True while passively ejected. */
  ejected = false;
  /** When the current ejection ends, ms; meaningful while `ejected`. */
  ejectedUntilMs = 0;
  /** Ejections so far, before decay (see `decayedEjectionCount`); multiplies the ejection time. */
  ejectionCount = 0;
  /** When the last ejection ended, ms; -1 when none has. */
  lastEjectionEndMs = -1;
  /** True once a refused ejection was reported in the current failure streak (report it once). */
  skipReported = false;
  /** True while active checks say the node is down. */
  checkDown = false;
  /** When the slow-start ramp began, ms; -1 when not ramping. */
  rampStartMs = -1;
  /** The node's active checker; null when active checks are off. */
  checker: ActiveChecker | null = null;
  /** The node's metrics scraper; null when scraping is off. */
  scraper: MetricsScraper | null = null;

  constructor(node: UpstreamNode) {
    this.node = node;
  }
}
