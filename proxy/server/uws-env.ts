/**
 * Settings uWS reads from the environment when its native module loads; imported before it.
 * The head-size cap is raised to 64 KiB so each listener's `max_header_bytes` (checked per request
 * with a JSON 431) is the limit that applies, not uWS's built-in 4 KiB.
 */
process.env['UWS_HTTP_MAX_HEADERS_SIZE'] ??= '65536';
export {};
