/**
 * The seam for endpoints Sluice answers itself instead of forwarding (the batch API): the session
 * asks `owns` before routing and hands the request over. The core knows nothing else about them.
 */
import type { Session } from './session.js';

/** Endpoints answered in process. */
export interface LocalEndpoints {
  /** True when Sluice answers `path` itself; checked on every request before routing, so it must be cheap. */
  owns(path: string): boolean;
  /** Answers the request: ends with exactly one `s.respond(...)` (or `s.fail(...)`), possibly later. */
  handle(s: Session): void;
}

/** Work a local endpoint runs for a request; `abort` is called once if the client leaves first. */
export interface LocalWork {
  abort(): void;
}
