/**
 * The core's view of the client connection. `proxy/server/` implements it over uWebSockets.js; the
 * core never sees uWS objects. Calls after `aborted` became true are ignored by implementations.
 */

export interface Downstream {
  /** True once the client went away; nothing more may be written. */
  readonly aborted: boolean;
  /** True once a response head was written (no more local error replies or retries). */
  readonly started: boolean;
  /**
   * Sends a complete response. `headers` is flat `[name, value, ...]`. `close` closes the
   * connection after the response (framing errors, draining).
   */
  reply(status: number, headers: readonly string[], body: string | Uint8Array, close: boolean): void;
  /**
   * The connection is to close once this response ends (the server drains, and a response tells
   * the client so with `Connection: close`). Call before `start`.
   */
  closeWhenDone(): void;
  /**
   * Writes the head of a streamed response. `contentLength` is the body size, or -1 when unknown
   * (chunked framing, e.g. SSE). `noBody` for 204/304; an answer to a client's HEAD has none either,
   * which the implementation knows from the request it serves (a plugin may forward another
   * method), as it does for `reply`. Header values are byte
   * strings (one character per byte, as in Node's `http`); `binary` says that some value holds a
   * character from U+0080 to U+00FF, to be written as that one byte.
   */
  start(
    status: number,
    headers: readonly string[],
    contentLength: number,
    noBody: boolean,
    binary?: boolean,
  ): void;
  /**
   * Writes a body chunk. Returns false under backpressure: the caller must stop producing until the
   * session's `onDownstreamDrain` is called. The chunk is not needed after the call returns.
   */
  write(chunk: Uint8Array): boolean;
  /** Finishes a streamed response (no-op when the body was sized and fully written). */
  end(): void;
  /** Closes the connection without finishing the body (the client sees a truncated response). */
  destroy(): void;
  /**
   * Takes back a head given to `start` while none of its bytes went out yet (a streamed head waits
   * for the first body bytes), so that `reply` can send an error instead. Returns false, changing
   * nothing, once any byte of the response was written.
   */
  abandonHead(): boolean;
}
