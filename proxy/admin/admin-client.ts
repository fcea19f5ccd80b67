/**
 * How command-line tools read a running Sluice's admin API: the token comes from the environment
 * variable `SLUICE_ADMIN_TOKEN` (never from an argument, which other users could see in `ps`).
 */

/** Headers for an admin request: `authorization: Bearer $SLUICE_ADMIN_TOKEN` when it is set. */
export function adminHeaders(env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const token = env['SLUICE_ADMIN_TOKEN'];
  return token === undefined || token === '' ? {} : { authorization: `Bearer ${token}` };
}

/**
 * What went wrong with a request to the admin API, in one line: the reason under `fetch failed`
 * (`ECONNREFUSED`, a DNS failure, a timeout) rather than that phrase alone.
 */
export function fetchFailure(e: unknown): string {
  if (!(e instanceof Error)) return String(e);
  const cause = (e as { cause?: unknown }).cause;
  if (cause instanceof Error) {
    const code = (cause as NodeJS.ErrnoException).code;
    return `${e.message}: ${code !== undefined ? `${code} (${cause.message})` : cause.message}`;
  }
  return e.message;
}

/**
 * A hint to add to an admin API's refusal: what to do about a 401, which depends on whether a token
 * was sent (`SLUICE_ADMIN_TOKEN` set) or not.
 */
export function statusHint(status: number, env: NodeJS.ProcessEnv = process.env): string {
  if (status !== 401) return '';
  const token = env['SLUICE_ADMIN_TOKEN'];
  return token === undefined || token === ''
    ? ' (the admin API wants its token: set SLUICE_ADMIN_TOKEN to it in the environment)'
    : ' (the admin API refused the token in SLUICE_ADMIN_TOKEN: it is not the one Sluice was started with)';
}
