/**
 * Runs Sluice for a scenario as a child process (`sluice serve --config FILE --no-watch`), so its
 * CPU is its own and can be measured: writes the expanded config to a temp file, waits for the
 * `listener NAME on ADDR:PORT` and `admin API on URL` log lines, and stops it with SIGTERM.
 */

import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LoadtestErrorCode } from '../loadtest-error.js';
import { cpuSeconds, startChild, stopChild, type Child } from './child-process.js';

/** A running Sluice child. */
export interface SluiceChild {
  /** Base URL of the listener traffic goes to, `http://127.0.0.1:PORT`. */
  url: string;
  /** Base URL of the admin API, `http://127.0.0.1:PORT`. */
  adminUrl: string;
  pid: number | undefined;
  /** CPU seconds the process has used so far; null where /proc is missing. */
  cpuSeconds(): Promise<number | null>;
  /** Drains and stops the process, then removes the temp config. */
  stop(): Promise<void>;
}

/**
 * Starts `sluice serve --config FILE --no-watch` on a config file the caller writes (and may
 * rewrite, or serve again after a restart) and resolves once its admin API is up. Rejects with
 * `SLUICE_LOADTEST_SLUICE_START_FAILED` and the child's last log lines otherwise.
 */
export function serveChild(file: string, timeoutMs = 30_000): Promise<Child> {
  return startChild(
    ['serve', '--config', file, '--no-watch'],
    (line) => ADMIN_LINE.test(line),
    { code: LoadtestErrorCode.sluiceStartFailed, what: 'the Sluice child process' },
    timeoutMs,
  );
}

const LISTENER_LINE = /listener (\S+) on (\S+):(\d+)/;
const ADMIN_LINE = /admin API on (http:\/\/\S+)/;

/**
 * Starts Sluice with `configText` (placeholders already filled in) and resolves once the listener
 * named `listener` (null = the first one logged) and the admin API are up. `server.workers: auto`
 * counts `cores` (`--cores`; default 1): the load generator and the simulated fleet share this
 * machine's cores, and variants compared side by side run on as many threads as one another
 * unless a config sets `server.workers` itself. Rejects with
 * `SLUICE_LOADTEST_SLUICE_START_FAILED` and the child's last log lines when it exits or is not up
 * within `timeoutMs`.
 */
export async function startSluiceChild(
  configText: string,
  listener: string | null,
  timeoutMs = 15_000,
  cores = 1,
): Promise<SluiceChild> {
  const dir = await mkdtemp(join(tmpdir(), 'sluice-loadtest-'));
  const file = join(dir, 'sluice.yaml');
  let url = '';
  let adminUrl = '';
  const isReady = (line: string): boolean => {
    const l = LISTENER_LINE.exec(line);
    if (l !== null && url === '' && (listener === null || l[1] === listener)) {
      // The listener is bound to a loopback address (checked with the scenario); dial that address.
      url = `http://${l[2] ?? '127.0.0.1'}:${l[3] ?? ''}`;
    }
    const a = ADMIN_LINE.exec(line);
    if (a !== null) adminUrl = a[1]!;
    return url !== '' && adminUrl !== '';
  };
  const failure = { code: LoadtestErrorCode.sluiceStartFailed, what: 'the Sluice child process' };
  const child = await writeFile(file, configText)
    .then(() =>
      startChild(
        ['serve', '--config', file, '--no-watch', '--cores', String(cores)],
        isReady,
        failure,
        timeoutMs,
      ),
    )
    .catch(async (err: unknown) => {
      await rm(dir, { recursive: true, force: true });
      throw err;
    });
  return {
    url,
    adminUrl,
    pid: child.process.pid,
    cpuSeconds: () => cpuSeconds(child.process.pid),
    stop: async () => {
      await stopChild(child);
      await rm(dir, { recursive: true, force: true });
    },
  };
}
