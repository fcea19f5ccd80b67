/**
 * Starts the benchmark's processes pinned to CPUs (`taskset -c LIST command ...`: taskset execs the
 * command, so the child's pid is the server's), logs their output to files, waits until they answer
 * HTTP, and stops every one of them: on a normal end, on SIGINT/SIGTERM, and, as a last resort, with
 * SIGKILL when this process exits. Children stay in this process's group, so a `timeout` around
 * the benchmark or a Ctrl-C in a terminal reaches them too.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createWriteStream, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

/** A process this set started. */
export interface Pinned {
  name: string;
  pid: number;
  child: ChildProcess;
  /** Resolves when it exits. */
  exited: Promise<void>;
  /** Last lines of its output, for error messages. */
  tail: string[];
}

const TAIL_LINES = 20;

/** Sleeps `ms` (a pause between load runs, never a wait for state). */
export function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Pids of `pid`'s direct children, from /proc (empty when it has none or is gone). */
export function childPids(pid: number): number[] {
  const out: number[] = [];
  try {
    for (const tid of readdirSync(`/proc/${pid}/task`)) {
      const text = readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').trim();
      if (text !== '') for (const p of text.split(/\s+/)) out.push(Number(p));
    }
  } catch {
    // gone
  }
  return out;
}

/** Moves every thread of `pid` to the CPUs in `cpus` (taskset list). */
export function repin(pid: number, cpus: string): void {
  const r = spawnSync('taskset', ['-a', '-p', '-c', cpus, String(pid)], { stdio: 'ignore' });
  if (r.status !== 0) throw new Error(`taskset could not move pid ${pid} to CPU ${cpus}`);
}

/** The processes of one benchmark run. */
export class PinnedProcesses {
  private readonly started: Pinned[] = [];
  private readonly onExit = (): void => this.killAll();

  constructor(private readonly logDir: string) {
    process.on('exit', this.onExit);
  }

  /** Starts `command args` on `cpus`, its output to `<logDir>/<name>.log`. */
  start(
    name: string,
    cpus: string,
    command: string,
    args: readonly string[],
    env: Record<string, string>,
  ): Pinned {
    const child = spawn('taskset', ['-c', cpus, command, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    });
    const log = createWriteStream(join(this.logDir, `${name}.log`));
    const tail: string[] = [];
    const keep = (chunk: Buffer): void => {
      log.write(chunk);
      for (const line of chunk.toString('utf8').split('\n')) {
        if (line === '') continue;
        tail.push(line);
        if (tail.length > TAIL_LINES) tail.shift();
      }
    };
    child.stdout.on('data', keep);
    child.stderr.on('data', keep);
    const exited = new Promise<void>((resolve) => {
      child.once('exit', () => {
        log.end();
        resolve();
      });
      child.once('error', (err) => {
        tail.push(err.message);
        resolve();
      });
    });
    const p: Pinned = { name, pid: child.pid ?? -1, child, exited, tail };
    this.started.push(p);
    return p;
  }

  /** True while `p` runs. */
  static alive(p: Pinned): boolean {
    return p.child.exitCode === null && p.child.signalCode === null;
  }

  /**
   * Resolves once `port` on 127.0.0.1 answers HTTP (any status); rejects when `p` exits first or
   * after `timeoutMs`, with its last output lines.
   */
  async waitForHttp(p: Pinned, port: number, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (!PinnedProcesses.alive(p)) break;
      try {
        const r = await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(1000) });
        await r.arrayBuffer();
        return;
      } catch {
        await pause(200);
      }
    }
    const why = PinnedProcesses.alive(p) ? `did not answer on port ${port} within ${timeoutMs} ms` : 'exited';
    throw new Error(`${p.name} ${why}; last output: ${p.tail.join(' | ') || '(none)'}`);
  }

  /**
   * Runs a short-lived command on `cpus` to its end and returns its output (stdout then stderr); it
   * is killed after `timeoutMs`.
   */
  async run(
    cpus: string,
    command: string,
    args: readonly string[],
    env: Record<string, string>,
    timeoutMs: number,
  ): Promise<{ code: number | null; output: string; timedOut: boolean }> {
    const child = spawn('taskset', ['-c', cpus, command, ...args], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, ...env },
    });
    const p: Pinned = { name: command, pid: child.pid ?? -1, child, exited: Promise.resolve(), tail: [] };
    this.started.push(p);
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (c: Buffer) => out.push(c));
    child.stderr.on('data', (c: Buffer) => err.push(c));
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    const code = await new Promise<number | null>((resolve) => {
      child.once('close', (c) => resolve(c));
      child.once('error', () => resolve(null));
    });
    clearTimeout(timer);
    this.started.splice(this.started.indexOf(p), 1);
    return { code, output: Buffer.concat([...out, ...err]).toString('utf8'), timedOut };
  }

  /** SIGTERM to every process still running, SIGKILL to those left after `graceMs`. */
  async stopAll(graceMs = 3000): Promise<void> {
    const live = this.started.filter((p) => PinnedProcesses.alive(p));
    for (const p of live) p.child.kill('SIGTERM');
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, graceMs)));
    await Promise.race([Promise.all(live.map((p) => p.exited)), late]);
    clearTimeout(timer);
    this.killAll();
    await Promise.all(live.map((p) => p.exited));
    process.off('exit', this.onExit);
  }

  /** SIGKILL to every process still running (synchronous: safe in an `exit` handler). */
  killAll(): void {
    for (const p of this.started) {
      if (!PinnedProcesses.alive(p)) continue;
      // nginx's worker is the master's child: it would outlive a killed master.
      for (const c of childPids(p.pid)) {
        try {
          process.kill(c, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      p.child.kill('SIGKILL');
    }
  }
}
