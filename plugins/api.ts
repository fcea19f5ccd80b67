/**
 * The plugin API: what a plugin module exports (`definePlugin`), what its hooks receive (the
 * request seen through `PluginRequest`) and what `create` is given (`PluginContext`). This module
 * holds types and one small helper only; it imports nothing from the proxy, so a plugin written
 * against it cannot reach uWS, undici or Sluice's internals. See docs/plugins.md.
 */

/** A value, or a promise of it. Hooks that return a plain value stay synchronous. */
export type MaybePromise<T> = T | PromiseLike<T>;

/** The phases, in lifecycle order. */
export const PHASES = [
  'onRequest',
  'onRoute',
  'onUpstreamRequest',
  'onResponseHead',
  'onResponseChunk',
  'onDone',
] as const;
export type PhaseName = (typeof PHASES)[number];

/**
 * Headers a plugin may not set, remove or rename, on either side: framing and the connection are
 * Sluice's (RFC 9110 §7.6.1, §8.6). The request API throws for them; a plugin that takes header
 * names as options should refuse these in `create`, so a bad config is rejected when it loads.
 */
export const MANAGED_HEADERS: ReadonlySet<string> = new Set([
  'connection',
  'content-length',
  'host',
  'keep-alive',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
]);

/**
 * Response headers the server writes itself on every answer (`Date`): a plugin's would make a
 * second one, so setting them throws, and a plugin taking header names as options should refuse them.
 */
export const SERVER_RESPONSE_HEADERS: ReadonlySet<string> = new Set(['date']);

/** Token usage a node reported (from the answer's `usage`). */
export interface Usage {
  prompt: number;
  completion: number;
  total: number;
}

/**
 * One request, as the hooks of every phase see it. Reading is allowed in every phase; each change
 * is allowed only in the phases its comment names: elsewhere it throws, which counts as a failure of
 * the calling plugin. One object per request, shared by the plugins of the chain in order.
 */
export interface PluginRequest {
  /** Request id (`x-request-id`). */
  readonly id: string;
  /** The phase running now. */
  readonly phase: PhaseName;
  /** Name of the listener the request came in on ('' for requests Sluice makes itself). */
  readonly listener: string;
  readonly method: string;
  /** Path without the query string. */
  readonly path: string;
  /** Path with the query string, as forwarded. */
  readonly url: string;
  /** The matched route's name; null before routing. */
  readonly route: string | null;
  /** The pool serving the request; null before it is chosen. */
  readonly pool: string | null;
  /** The node of the current attempt (onUpstreamRequest), or of the answer; null before. */
  readonly node: string | null;
  /** Attempts dispatched so far (1 in the first onUpstreamRequest). */
  readonly attempt: number;
  /** The calling tenant's name ('' without tenants until a plugin sets one). */
  readonly tenant: string;
  /** True for a request Sluice makes itself (a batch item); its tenant is already known. */
  readonly internal: boolean;
  /** Response status: the node's from onResponseHead on, the final one in onDone; 0 before. */
  readonly status: number;
  /** Tags set by `tag`, for later phases and onDone. */
  readonly tags: Readonly<Record<string, string>>;
  /** This plugin's own per-request value (each plugin of the chain has its own); undefined at first. */
  state: unknown;

  /** A request header by lower-case name (in onUpstreamRequest: the attempt's copy). */
  header(name: string): string | undefined;
  /** The request body bytes, or null. */
  readonly body: Buffer | null;
  /** The body parsed as JSON (once per body), or null when absent or not JSON. */
  json(): unknown;

  /** onRequest: changes the method. */
  setMethod(method: string): void;
  /** onRequest: changes the path (and query), e.g. `/v1/chat/completions?x=1`. */
  setUrl(url: string): void;
  /**
   * onRequest: the request's headers; onUpstreamRequest: this attempt's headers only. Values are
   * byte strings, one character per byte, as in Node's `http` (U+0080 to U+00FF go out as that
   * byte; a wider character throws: encode such text first, e.g. RFC 8187 percent-encoding).
   */
  setHeader(name: string, value: string): void;
  /** onRequest, onUpstreamRequest: removes every value of a header. */
  removeHeader(name: string): void;
  /** onRequest: the body; onUpstreamRequest: this attempt's body. An object is sent as JSON. */
  setBody(body: string | Uint8Array | object): void;
  /** onRequest: serves the request as this tenant (the API-key check is skipped). */
  setTenant(name: string): void;
  /**
   * onRequest, onRoute: answers locally; the request ends after the hook. `status` 200–599; the body
   * a string or bytes (a 204, 205 or 304 has none); header values strings, byte strings as `setHeader`
   * (not `date`, which the server writes).
   * Anything else throws a TypeError (the hook then fails: 500 `plugin_error`).
   */
  respond(status: number, body: string | Uint8Array, headers?: Readonly<Record<string, string>>): void;
  /** onRequest, onRoute: answers with an OpenAI-style error body; `status` 400–599. */
  reject(status: number, message: string, code?: string | null, param?: string | null): void;
  /** onRoute: sends the request to another pool of the config. */
  usePool(name: string): void;
  /** Any phase before onDone: attaches a tag. */
  tag(name: string, value: string): void;

  /**
   * onResponseHead on: a response header by lower-case name, as a byte string (one character per
   * byte the node sent, so a UTF-8 value reads as its bytes: decode with
   * `Buffer.from(v, 'latin1').toString()`).
   */
  responseHeader(name: string): string | undefined;
  /** onResponseHead: sets a response header (not hop-by-hop, not content-length); a byte string, as `setHeader`. */
  setResponseHeader(name: string, value: string): void;
  /** onResponseHead: removes a response header. */
  removeResponseHeader(name: string): void;
  /** onResponseHead: changes the status sent to the client (204 or 304: the node's body is dropped, none is sent). */
  setStatus(status: number): void;
  /** True when the answer is an SSE stream (onResponseHead on). */
  readonly streaming: boolean;

  /** onDone: arrival to the end, ms. */
  readonly durationMs: number;
  /** onDone: arrival to the response head, ms; -1 when no node answered. */
  readonly ttfbMs: number;
  /** onDone: the node's usage report, or null. */
  readonly usage: Usage | null;
  /** onDone: response body bytes sent. */
  readonly bytesOut: number;
  /** onDone: the error code when Sluice or a plugin ended the request with an error, else null. */
  readonly errorCode: string | null;
}

/** What a plugin's `create` returns: its hooks (all optional) and an optional `close`. */
export interface PluginHooks {
  /**
   * Head and body complete. Listener plugins run before routing; route plugins right after the
   * route matched, before the tenant is authenticated. May rewrite, set the tenant, or answer.
   */
  onRequest?(req: PluginRequest): MaybePromise<void>;
  /** Route matched and tenant known; may answer, reject, tag, or choose another pool. */
  onRoute?(req: PluginRequest): MaybePromise<void>;
  /** Per attempt, before it goes to the node: headers and body of this attempt. */
  onUpstreamRequest?(req: PluginRequest): MaybePromise<void>;
  /** The winning node's status and headers, before they go to the client; may rewrite them. */
  onResponseHead?(req: PluginRequest): MaybePromise<void>;
  /**
   * Opt-in, per body chunk as it streams; `chunk` is null once at the end. Return nothing to
   * forward the chunk as it is, or the bytes to send instead (possibly empty). With any chunk hook
   * on a route the body is sent chunked. Never hold a stream back unless the plugin means to.
   */
  onResponseChunk?(req: PluginRequest, chunk: Buffer | null): MaybePromise<Uint8Array | string | void>;
  /** After the last byte or the error, exactly once; cannot change the response. */
  onDone?(req: PluginRequest): MaybePromise<void>;
  /** Called when the instance is retired (reload, shutdown) after its last request, its onDone included. */
  close?(): MaybePromise<void>;
}

/** Counter of a plugin's own series. */
/** A label value: a string, or a finite number or a boolean (kept as its text, `200` as `"200"`). */
export type LabelValue = string | number | boolean;

export interface PluginCounter {
  /** Adds `n` (default 1; finite, not negative) to the series with these label values (in declared order). */
  inc(n?: number, ...labelValues: LabelValue[]): void;
}

/** Gauge of a plugin's own series. */
export interface PluginGauge {
  /** Sets the series with these label values to `value` (finite). */
  set(value: number, ...labelValues: LabelValue[]): void;
}

/** The plugin's metrics: names must start with `sluice_plugin_`; series survive reloads. */
export interface PluginMetrics {
  counter(name: string, help: string, labelNames?: readonly string[]): PluginCounter;
  gauge(name: string, help: string, labelNames?: readonly string[]): PluginGauge;
}

/** Leveled log lines, prefixed with the plugin instance's name. */
export interface PluginLogger {
  debug(msg: string): void;
  info(msg: string): void;
  warn(msg: string): void;
  error(msg: string): void;
}

/** Clocks: `nowMs` is monotonic (measure with it), `wallMs` is epoch time (timestamps). */
export interface PluginClock {
  nowMs(): number;
  wallMs(): number;
}

/**
 * A bounded key-value store, namespaced per plugin instance name: in process (entries bounded,
 * least recently used dropped first) or in the configured Redis (shared by Sluice instances). The
 * only state that outlives a reload. Every call may reject (Redis down or slow).
 */
export interface KeyValueStore {
  /** `memory` or `redis`. */
  readonly kind: 'memory' | 'redis';
  get(key: string): Promise<string | null>;
  /** Stores `value`; with `ttlMs` > 0 it expires after that long. */
  set(key: string, value: string, ttlMs?: number): Promise<void>;
  delete(key: string): Promise<void>;
  /** Adds `by` (default 1) to an integer value (0 when absent) and returns the new value. */
  incr(key: string, by?: number, ttlMs?: number): Promise<number>;
}

/** What `create` is given. Nothing here reaches uWS or undici. */
export interface PluginContext {
  /** The instance name from the config. */
  readonly name: string;
  /** Directory of the config file, for options that name files. */
  readonly configDir: string;
  readonly log: PluginLogger;
  readonly metrics: PluginMetrics;
  readonly clock: PluginClock;
  readonly kv: KeyValueStore;
}

/** A plugin module's export. */
export interface PluginDefinition<O = Record<string, unknown>> {
  /** Kebab-case plugin name, e.g. `model-alias`. */
  readonly name: string;
  /** The plugin's version (semver). */
  readonly version: string;
  /** JSON Schema of the YAML `options`; defaults in it are filled in. Absent: no options. */
  readonly options?: Readonly<Record<string, unknown>>;
  /** Builds one instance from validated options; throwing or rejecting rejects the config. */
  create(options: O, context: PluginContext): MaybePromise<PluginHooks>;
}

const NAME = /^[a-z0-9][a-z0-9-]{0,62}$/;

/**
 * Declares a plugin; a module exports the result as `default` (or as `plugin`). Checks the shape
 * at once so a mistake fails when the module is loaded, not on the first request.
 *
 * @example
 * export default definePlugin({
 *   name: 'hello',
 *   version: '1.0.0',
 *   options: { type: 'object', properties: { greeting: { type: 'string', default: 'hi' } } },
 *   create: (options: { greeting: string }) => ({
 *     onResponseHead(req) {
 *       req.setResponseHeader('x-greeting', options.greeting);
 *     },
 *   }),
 * });
 */
export function definePlugin<O>(definition: PluginDefinition<O>): PluginDefinition<O> {
  const problem = pluginDefinitionProblem(definition);
  if (problem !== null) throw new TypeError(`definePlugin: ${problem}`);
  return Object.freeze({ ...definition });
}

/** Why `value` is not a plugin definition, or null when it is one. */
export function pluginDefinitionProblem(value: unknown): string | null {
  if (typeof value !== 'object' || value === null) return 'expected an object { name, version, create }';
  const d = value as Record<string, unknown>;
  if (typeof d['name'] !== 'string' || !NAME.test(d['name']))
    return 'name must be a kebab-case string (a-z, 0-9, -)';
  if (typeof d['version'] !== 'string' || d['version'] === '') return 'version must be a non-empty string';
  if (typeof d['create'] !== 'function') return 'create must be a function (options, context) => hooks';
  const o = d['options'];
  if (o !== undefined && (typeof o !== 'object' || o === null || Array.isArray(o)))
    return 'options must be a JSON Schema object';
  return null;
}
