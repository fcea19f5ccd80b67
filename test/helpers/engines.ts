/**
 * The two downstream engines a listener can run on, for tests that hold both to the same table:
 * uWS (`pipelining: 0`) and Sluice's own HTTP/1.1 server (`pipelining` > 0). Test support only.
 */

/** One engine under test. */
export interface Engine {
  /** `uws` or `net`. */
  name: 'uws' | 'net';
  /** The listener's `pipelining` setting that selects it. */
  pipelining: number;
}

export const ENGINES: readonly Engine[] = [
  { name: 'uws', pipelining: 0 },
  { name: 'net', pipelining: 16 },
];

/**
 * Adds `keys` (listener settings such as `{ pipelining: 4, max_connections: 5 }`) to the first
 * listener of a test config built with `LOOPBACK_HEAD` or `basicConfig`.
 */
export function withListenerKeys(yaml: string, keys: Record<string, number>): string {
  const marker = '    port: 0\n';
  const at = yaml.indexOf(marker);
  if (at < 0) throw new Error('the config has no listener on port 0');
  const lines = Object.entries(keys)
    .map(([k, v]) => `    ${k}: ${v}\n`)
    .join('');
  return yaml.slice(0, at + marker.length) + lines + yaml.slice(at + marker.length);
}
