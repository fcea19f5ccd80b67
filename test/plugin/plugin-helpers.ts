/**
 * Test helpers for plugins: the probe plugin's path, YAML for a plugin instance, and reading a
 * metric from the admin API. Test support only.
 */
import { fileURLToPath } from 'node:url';
import type { TestSluice } from '../helpers/sluice.js';

/** Absolute path of the compiled probe plugin (loaded by path like a third-party plugin). */
export const PROBE_PLUGIN = fileURLToPath(new URL('./fixtures/probe-plugin.js', import.meta.url));

/** The probe's trace: phases by request id. */
export function probeTrace(): Map<string, string[]> {
  const g = globalThis as { __probeTrace?: Map<string, string[]> };
  return (g.__probeTrace ??= new Map<string, string[]>());
}

/** The value of one series from `/metrics` (exact name with labels), or 0 when absent. */
export async function metric(t: TestSluice, series: string): Promise<number> {
  const text = await (await fetch(`${t.adminUrl}/metrics`)).text();
  for (const line of text.split('\n')) {
    if (line.startsWith(`${series} `)) return Number(line.slice(series.length + 1));
  }
  return 0;
}
