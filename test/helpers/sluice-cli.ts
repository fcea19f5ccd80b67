/**
 * Test helpers: the `sluice` command (bin/sluice.js) as a real child process, its output kept as
 * text, and a bounded wait for its exit. Test support only.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const bin = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', 'bin', 'sluice.js');

/** A running `sluice` process. */
export interface SluiceProc {
  child: ChildProcess;
  /** Everything it wrote so far, stdout and stderr interleaved. */
  out: () => string;
  /** Resolves with the exit code (null when a signal killed it). */
  exit: Promise<number | null>;
}

/** Starts `sluice ...args`. The caller kills it (SIGKILL in a `finally`). */
export function runSluice(args: string[]): SluiceProc {
  const child = spawn(process.execPath, [bin, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  child.stdout.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return { child, out: () => out, exit };
}

/** The exit code, or 'still running' when the process has not exited within `ms`. */
export async function exitWithin(p: SluiceProc, ms: number): Promise<number | null | 'still running'> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<'still running'>((r) => (timer = setTimeout(r, ms, 'still running')));
  try {
    return await Promise.race([p.exit, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** The listener port and admin port from the startup lines of `sluice serve`; 0 when not printed yet. */
export function servePorts(out: string): { port: number; admin: number } {
  return {
    port: Number(/listener public on 127\.0\.0\.1:(\d+)/.exec(out)?.[1] ?? 0),
    admin: Number(/admin API on http:\/\/127\.0\.0\.1:(\d+)/.exec(out)?.[1] ?? 0),
  };
}
