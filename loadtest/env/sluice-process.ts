/**
 * Runs Sluice for a scenario as a child process (`sluice serve --config FILE --no-watch`), so its
 * CPU is its own and can be measured: writes the expanded config to a temp file, waits for the
 * `listener NAME on ADDR:PORT` and `admin API on URL` log lines, and stops it with SIGTERM.
 */

import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LoadtestError, LoadtestErrorCode } from '../loadtest-error.js';
import { cpuSeconds, spawnChild, stopChild } from './child-process.js';

/** A running Sluice child. */
export interface SluiceChild {
  /** Base URL of the listener traffic goes to, `http://127.0.0.1:PORT`. */
  url: string;
  /** Base URL of the admin API, or null if its line was not seen. */
  adminUrl: string | null;
  pid: number | undefined;
  /** CPU seconds the process has used so far; null where /proc is missing. */
  cpuSeconds(): Promise<number | null>;
  /** Drains and stops the process, then removes the temp config. */
  stop(): Promise<void>;
}

const LISTENER_LINE = /listener (\S+) on (\S+):(\d+)/;
const ADMIN_LINE = /admin API on (http:\/\/[^\s(]+)/;

/**
 * Starts Sluice with `configText` (placeholders already filled in) and resolves once the listener
 * named `listener` (null = the first one logged) and the admin API are up. Rejects with
 * `SLUICE_LOADTEST_SLUICE_START_FAILED` and the child's last log lines when it exits or is not up
 * within `timeoutMs`.
 */
export async function startSluiceChild(
  configText: string,
  listener: string | null,
  timeoutMs = 15_000,
): Promise<SluiceChild> {
  const dir = await mkdtemp(join(tmpdir(), 'sluice-loadtest-'));
  const file = join(dir, 'sluice.yaml');
  await writeFile(file, configText);
  const seen: { url: string | null; adminUrl: string | null } = { url: null, adminUrl: null };
  let ready!: () => void;
  const up = new Promise<void>((resolve) => (ready = resolve));
  const child = spawnChild(['serve', '--config', file, '--no-watch'], (line) => {
    const l = LISTENER_LINE.exec(line);
    if (l !== null && seen.url === null && (listener === null || l[1] === listener)) {
      // The listener is bound to a loopback address (checked with the scenario); dial that address.
      seen.url = `http://${l[2] ?? '127.0.0.1'}:${l[3] ?? ''}`;
    }
    const a = ADMIN_LINE.exec(line);
    if (a !== null) seen.adminUrl = a[1] ?? null;
    if (seen.url !== null && seen.adminUrl !== null) ready();
  });
  const cleanup = async (): Promise<void> => {
    await stopChild(child);
    await rm(dir, { recursive: true, force: true });
  };
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    up.then(() => 'up' as const),
    child.exited.then((code) => `exited with ${code}` as const),
    new Promise<'timeout'>((resolve) => (timer = setTimeout(resolve, timeoutMs, 'timeout'))),
  ]);
  clearTimeout(timer);
  if (outcome !== 'up' || seen.url === null) {
    await cleanup();
    const what = outcome === 'timeout' ? `did not report its listener within ${timeoutMs} ms` : outcome;
    throw new LoadtestError(
      LoadtestErrorCode.sluiceStartFailed,
      `the Sluice child process ${what}; its last log lines:`,
      child.tail,
    );
  }
  return {
    url: seen.url,
    adminUrl: seen.adminUrl,
    pid: child.process.pid,
    cpuSeconds: () => cpuSeconds(child.process.pid),
    stop: cleanup,
  };
}
