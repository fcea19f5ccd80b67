/**
 * Starts and stops the load tester's child processes (`child-entry.js` with a command), reads their
 * output line by line, waits for the line that says a child is ready, and reads their CPU time from
 * /proc. Knows nothing about what the child does.
 */

import { spawn, type ChildProcess } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { LoadtestError, type LoadtestErrorCode } from '../loadtest-error.js';

/** Lines of output kept for error messages. */
const TAIL_LINES = 30;

/** A running child. */
export interface Child {
  process: ChildProcess;
  /** Last lines the child wrote (stdout and stderr). */
  tail: string[];
  /** Resolves with the exit code (or the signal name) when the child exits. */
  exited: Promise<number | string>;
}

/**
 * Spawns `node child-entry.js ...args` in its own process group. `onLine` sees every output line
 * (stdout and stderr) as it comes. The child gets `SLUICE_LOG_LEVEL=info` so that its listener lines
 * are printed.
 */
function spawnChild(args: string[], onLine: (line: string) => void): Child {
  const entry = fileURLToPath(new URL('./child-entry.js', import.meta.url));
  // A process group of its own: Ctrl-C in a terminal reaches the load generator only, which then
  // drains and stops its children itself (the child exits on its own if the generator dies).
  const child = spawn(process.execPath, [entry, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, SLUICE_LOG_LEVEL: 'info' },
    detached: true,
  });
  const tail: string[] = [];
  for (const stream of [child.stdout, child.stderr]) {
    createInterface({ input: stream }).on('line', (line) => {
      tail.push(line);
      if (tail.length > TAIL_LINES) tail.shift();
      onLine(line);
    });
  }
  const exited = new Promise<number | string>((resolve) => {
    child.once('exit', (code, signal) => resolve(code ?? signal ?? 'unknown'));
    child.once('error', (err) => resolve(err.message));
  });
  return { process: child, tail, exited };
}

/** How `startChild` reports a child that never became ready. */
export interface ChildStartFailure {
  /** Error code of the rejection. */
  code: LoadtestErrorCode;
  /** What the child is, starting the message, e.g. `the Sluice child process`. */
  what: string;
}

/**
 * Spawns `node child-entry.js ...args` (see `spawnChild`) and resolves once `isReady` has returned
 * true for one of its output lines. When the child exits first or is not ready within `timeoutMs`, stops it and rejects
 * with a `LoadtestError` of `failure.code` whose details are the child's last output lines.
 */
export async function startChild(
  args: string[],
  isReady: (line: string) => boolean,
  failure: ChildStartFailure,
  timeoutMs: number,
): Promise<Child> {
  let ready!: () => void;
  const up = new Promise<void>((resolve) => (ready = resolve));
  const child = spawnChild(args, (line) => {
    if (isReady(line)) ready();
  });
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    up.then(() => 'up'),
    child.exited.then((code) => `exited with ${code}`),
    new Promise<string>(
      (resolve) => (timer = setTimeout(resolve, timeoutMs, `was not ready within ${timeoutMs} ms`)),
    ),
  ]);
  clearTimeout(timer);
  if (outcome === 'up') return child;
  await stopChild(child);
  throw new LoadtestError(failure.code, `${failure.what} ${outcome}; its last output lines:`, child.tail);
}

/** Sends SIGTERM, waits up to `graceMs`, then SIGKILL. Resolves once the child has exited. */
export async function stopChild(child: Child, graceMs = 5000): Promise<void> {
  if (child.process.exitCode !== null || child.process.signalCode !== null) return;
  child.process.kill('SIGTERM');
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'late'>((resolve) => (timer = setTimeout(resolve, graceMs, 'late')));
  if ((await Promise.race([child.exited, late])) === 'late') {
    child.process.kill('SIGKILL');
    await child.exited;
  }
  clearTimeout(timer);
}

/** CPU seconds (user + system) a process has used, from /proc/PID/stat; null off Linux or after exit. */
export async function cpuSeconds(pid: number | undefined): Promise<number | null> {
  if (pid === undefined) return null;
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name: state is index 0, utime 11 and stime 12, in clock ticks (100/s).
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return null;
  }
}
