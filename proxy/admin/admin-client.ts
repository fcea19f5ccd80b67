/**
 * How command-line tools read a running Sluice's admin API: the token comes from the environment
 * variable `SLUICE_ADMIN_TOKEN` (never from an argument, which other users could see in `ps`).
 */

/** Headers for an admin request: `authorization: Bearer $SLUICE_ADMIN_TOKEN` when it is set. */
export function adminHeaders(env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const token = env['SLUICE_ADMIN_TOKEN'];
  return token === undefined || token === '' ? {} : { authorization: `Bearer ${token}` };
}
