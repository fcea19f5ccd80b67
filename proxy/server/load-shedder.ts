/**
 * The request path's view of overload protection: one flag read per request where a request would
 * become a session, and the prepared 503 to send while it is up. `runtime/overload-monitor.ts`
 * raises and lowers the flag; nothing here measures anything.
 */

/** What the listeners read before they create a session. */
export interface LoadShedder {
  /** True while new requests are refused with the prepared reply. */
  readonly shedding: boolean;
  /** Headers of the 503 (content type and Retry-After), flat. */
  readonly replyHeaders: readonly string[];
  /** The OpenAI-shaped body of the 503. */
  readonly replyBody: string;
  /** Requests refused since start. */
  shed: number;
}

/** The shedder of a process whose overload protection is off: never sheds, allocates nothing. */
export const NEVER_SHED: LoadShedder = {
  shedding: false,
  replyHeaders: [],
  replyBody: '',
  shed: 0,
};
