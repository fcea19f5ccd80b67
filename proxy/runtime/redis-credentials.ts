/**
 * Tells a Redis that refused a client's credentials (a configuration error: a wrong or missing user
 * or password in the store's URL) from a Redis that is down or slow (an outage the stores ride
 * out), and names a Redis in messages without its credentials. The Redis stores refuse to start on
 * the first and degrade on the second.
 */

/**
 * True when `err` is Redis refusing the connection's credentials: `WRONGPASS` (wrong user or
 * password) or `NOAUTH` (the server wants a password and the URL has none).
 */
export function isRedisAuthError(err: unknown): err is Error {
  return err instanceof Error && (err.message.startsWith('WRONGPASS') || err.message.startsWith('NOAUTH'));
}

/** The message for a refusal seen by store `name` (e.g. `rate_limits.redis`) at `host` (`host:port`). */
export function redisAuthMessage(name: string, host: string, err: Error): string {
  return (
    `${name}: redis at ${host} refused the credentials (${err.message}); ` +
    'set the user and password in the url (redis://user:password@host:port, special characters percent-encoded)'
  );
}

/** `host:port` of a Redis URL, for messages (never the credentials). */
export function redisHost(url: string): string {
  try {
    return new URL(url).host;
  } catch {
    return 'redis';
  }
}
