/**
 * The data-plane error catalogue: every failure a request can meet, with its stable code, where it
 * came from, whether a retry on another node may help, and the HTTP status sent to the client.
 * A new kind of failure is a new entry here; nothing else invents status codes.
 */

/** Where a failure originated. */
export const ErrorSource = {
  downstream: 'downstream',
  upstream: 'upstream',
  internal: 'internal',
} as const;
export type ErrorSource = (typeof ErrorSource)[keyof typeof ErrorSource];

/** One catalogue entry. `type` and `code` are what OpenAI-style clients see in the error body. */
export interface ErrorKind {
  /** Stable identifier, `SLUICE_<AREA>_<WHAT>`. */
  readonly id: string;
  readonly source: ErrorSource;
  /** HTTP status sent when the failure happens before the response head went out. */
  readonly status: number;
  /** OpenAI error `type`. */
  readonly type: string;
  /** OpenAI error `code` (snake_case, machine-readable). */
  readonly code: string;
  /** True when the request may be sent to another node (nothing reached the client yet). */
  readonly retryable: boolean;
  /** True when the downstream connection must be closed after the reply (framing errors). */
  readonly closeConnection: boolean;
}

function kind(
  id: string,
  source: ErrorSource,
  status: number,
  type: string,
  code: string,
  retryable = false,
  closeConnection = false,
): ErrorKind {
  return Object.freeze({ id, source, status, type, code, retryable, closeConnection });
}

/** The catalogue. Codes are stable once released. */
export const Errors = {
  badFraming: kind(
    'SLUICE_DOWNSTREAM_BAD_FRAMING',
    'downstream',
    400,
    'invalid_request_error',
    'bad_framing',
    false,
    true,
  ),
  bodyTooLarge: kind(
    'SLUICE_DOWNSTREAM_BODY_TOO_LARGE',
    'downstream',
    413,
    'invalid_request_error',
    'request_too_large',
    false,
    true,
  ),
  headersTooLarge: kind(
    'SLUICE_DOWNSTREAM_HEADERS_TOO_LARGE',
    'downstream',
    431,
    'invalid_request_error',
    'request_headers_too_large',
    false,
    true,
  ),
  urlTooLong: kind(
    'SLUICE_DOWNSTREAM_URL_TOO_LONG',
    'downstream',
    414,
    'invalid_request_error',
    'request_uri_too_long',
    false,
    true,
  ),
  httpVersion: kind(
    'SLUICE_DOWNSTREAM_HTTP_VERSION',
    'downstream',
    505,
    'invalid_request_error',
    'http_version_not_supported',
    false,
    true,
  ),
  methodNotSupported: kind(
    'SLUICE_DOWNSTREAM_METHOD_NOT_SUPPORTED',
    'downstream',
    501,
    'invalid_request_error',
    'method_not_supported',
    false,
    true,
  ),
  requestTimeout: kind(
    'SLUICE_DOWNSTREAM_REQUEST_TIMEOUT',
    'downstream',
    408,
    'invalid_request_error',
    'request_timeout',
    false,
    true,
  ),
  invalidApiKey: kind(
    'SLUICE_AUTH_INVALID_KEY',
    'downstream',
    401,
    'invalid_request_error',
    'invalid_api_key',
  ),
  rateLimitRequests: kind('SLUICE_RATELIMIT_REQUESTS', 'downstream', 429, 'requests', 'rate_limit_exceeded'),
  rateLimitTokens: kind('SLUICE_RATELIMIT_TOKENS', 'downstream', 429, 'tokens', 'rate_limit_exceeded'),
  rateLimitConcurrency: kind(
    'SLUICE_RATELIMIT_CONCURRENCY',
    'downstream',
    429,
    'requests',
    'rate_limit_exceeded',
  ),
  rateLimitUnavailable: kind(
    'SLUICE_RATELIMIT_UNAVAILABLE',
    'internal',
    503,
    'server_error',
    'rate_limiter_unavailable',
  ),
  overloaded: kind('SLUICE_ADMISSION_OVERLOADED', 'internal', 503, 'server_error', 'server_is_overloaded'),
  deadlineExceeded: kind('SLUICE_ADMISSION_DEADLINE', 'internal', 503, 'server_error', 'deadline_exceeded'),
  invalidRequest: kind(
    'SLUICE_DOWNSTREAM_INVALID_REQUEST',
    'downstream',
    400,
    'invalid_request_error',
    'invalid_request',
  ),
  routeNotFound: kind(
    'SLUICE_ROUTE_NOT_FOUND',
    'downstream',
    404,
    'invalid_request_error',
    'route_not_found',
  ),
  /** No route serves the model the body names (routes match on `models`): OpenAI's own code. */
  modelNotFound: kind(
    'SLUICE_ROUTE_MODEL_NOT_FOUND',
    'downstream',
    404,
    'invalid_request_error',
    'model_not_found',
  ),
  noHealthyNode: kind('SLUICE_POOL_NO_NODE', 'internal', 503, 'server_error', 'no_healthy_upstream'),
  draining: kind('SLUICE_SERVER_DRAINING', 'internal', 503, 'server_error', 'server_shutting_down'),
  /** Sluice itself is past its event-loop delay or heap threshold (`server.overload`). */
  proxyOverloaded: kind('SLUICE_SERVER_OVERLOADED', 'internal', 503, 'server_error', 'proxy_overloaded'),
  connectFailed: kind(
    'SLUICE_UPSTREAM_CONNECT_FAILED',
    'upstream',
    502,
    'server_error',
    'upstream_connect_error',
    true,
  ),
  connectTimeout: kind(
    'SLUICE_UPSTREAM_CONNECT_TIMEOUT',
    'upstream',
    504,
    'server_error',
    'upstream_connect_timeout',
    true,
  ),
  ttfbTimeout: kind('SLUICE_UPSTREAM_TTFB_TIMEOUT', 'upstream', 504, 'server_error', 'upstream_timeout'),
  idleTimeout: kind('SLUICE_UPSTREAM_IDLE_TIMEOUT', 'upstream', 504, 'server_error', 'upstream_idle_timeout'),
  totalTimeout: kind('SLUICE_UPSTREAM_TOTAL_TIMEOUT', 'upstream', 504, 'server_error', 'upstream_timeout'),
  upstreamReset: kind('SLUICE_UPSTREAM_RESET', 'upstream', 502, 'server_error', 'upstream_connection_reset'),
  upstreamStatus: kind('SLUICE_UPSTREAM_STATUS', 'upstream', 502, 'server_error', 'upstream_error'),
  upstreamProtocol: kind(
    'SLUICE_UPSTREAM_PROTOCOL',
    'upstream',
    502,
    'server_error',
    'upstream_protocol_error',
  ),
  internal: kind('SLUICE_INTERNAL', 'internal', 500, 'server_error', 'internal_error'),
  /** A plugin hook threw, rejected or ran past its `timeout_ms` (not `fail_open`). */
  pluginFailed: kind('SLUICE_PLUGIN_FAILED', 'internal', 500, 'server_error', 'plugin_error'),
  /** A plugin answered with `reject` (the status is the plugin's; counted under this id). */
  pluginRejected: kind(
    'SLUICE_PLUGIN_REJECTED',
    'downstream',
    400,
    'invalid_request_error',
    'rejected_by_plugin',
  ),
} as const;

/** A data-plane failure: a catalogue entry, a human message and the underlying cause. */
export class SluiceError extends Error {
  readonly kind: ErrorKind;
  /** Extra response headers (e.g. `retry-after`), flat `[name, value, ...]`. */
  readonly headers: readonly string[];

  constructor(kind: ErrorKind, message: string, cause?: unknown, headers: readonly string[] = []) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'SluiceError';
    this.kind = kind;
    this.headers = headers;
  }
}

/**
 * The OpenAI-shaped error body for a failure: `{"error": {"message", "type", "param", "code"}}`.
 * Clients' SDKs parse this shape, so every error Sluice originates uses it.
 */
export function errorBody(kind: ErrorKind, message: string, param: string | null = null): string {
  return JSON.stringify({ error: { message, type: kind.type, param, code: kind.code } });
}

/** The SSE event sent when a stream fails after its head went out (a silent close looks like success). */
export function errorEvent(kind: ErrorKind, message: string): string {
  return `data: ${errorBody(kind, message)}\n\n`;
}
