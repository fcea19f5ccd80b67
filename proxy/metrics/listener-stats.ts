/**
 * Per-listener connection counters: what the downstream engines did with connections (held,
 * refused at the cap, closed on a deadline) and the most response bytes one connection held for a
 * slow client. They live across reloads (listeners cannot change while running).
 */

/** One listener's connection counters. */
export class ListenerStats {
  readonly listener: string;
  /** Connections open now (when counted: see `connectionsCounted`). */
  connections = 0;
  /** False for a uWS listener without `max_connections`, whose connections are not counted. */
  connectionsCounted = true;
  /** Connections closed at accept because `max_connections` were open. */
  refused = 0;
  /** Connections closed because a request head did not arrive within `header_timeout_ms`. */
  headerTimeouts = 0;
  /** Requests refused because their body did not arrive within `body_timeout_ms`. */
  bodyTimeouts = 0;
  /** Requests aborted because the client took no response bytes for `write_timeout_ms`. */
  writeTimeouts = 0;
  /**
   * Most response bytes one connection held in Sluice for its client, bytes (own engine only: the
   * uWS engine does not expose its buffer).
   */
  bufferedHighWater = 0;

  constructor(listener: string) {
    this.listener = listener;
  }
}
