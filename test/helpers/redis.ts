/**
 * Test helper: a private `redis-server` on a free loopback port, with no persistence, started for
 * one test file and killed after it. It can be stopped and started again on the same port (Redis
 * down, then back) or frozen with SIGSTOP (Redis up but not answering). Suites that need it pass
 * `{ skip: redisSkip() }`: without `redis-server` on PATH they are skipped with one loud line, unless
 * `SLUICE_TEST_REQUIRE_REDIS=1` (set by `.ci/run`), where the missing binary fails them instead.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../loadtest/env/free-port.js';

/** A running (or stopped) test Redis. */
export interface TestRedis {
  /** `redis://127.0.0.1:PORT`. */
  readonly url: string;
  readonly port: number;
  /** Stops the server (SIGTERM, then SIGKILL after 2 s) and waits for it to exit. Idempotent. */
  stop(): Promise<void>;
  /** Starts the server again on the same port, empty (no persistence), and waits until it answers. */
  start(): Promise<void>;
  /** Freezes the process (SIGSTOP): connections stay open but nothing is answered. */
  pause(): void;
  /** Thaws a paused process (SIGCONT). */
  resume(): void;
}

const READY_TIMEOUT_MS = 5000;
const INSTALL_HINT = 'install it (`apt-get install -y redis-server`, `brew install redis`)';
let skipReason: string | false | undefined;

/**
 * The `skip` option for a suite that needs a real Redis: false when `redis-server` is on PATH or
 * `SLUICE_TEST_REQUIRE_REDIS=1` is set (then a missing binary fails the suite instead), else the
 * reason, which is also printed once to stderr so that a skip is never silent.
 */
export function redisSkip(): string | false {
  if (skipReason !== undefined) return skipReason;
  const found = spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).error === undefined;
  if (found || process.env['SLUICE_TEST_REQUIRE_REDIS'] === '1') skipReason = false;
  else {
    skipReason = `redis-server is not on PATH: the Redis suites are skipped; ${INSTALL_HINT}, or set SLUICE_TEST_REQUIRE_REDIS=1 to make this a failure`;
    process.stderr.write(`\n*** SKIPPING REDIS TESTS: ${skipReason} ***\n\n`);
  }
  return skipReason;
}
const live = new Set<ChildProcess>();
let exitHookInstalled = false;

/**
 * Starts `redis-server` on 127.0.0.1 and a free port, with `--save ''` and `--appendonly no`, and
 * resolves once it answers PING. Rejects with an explanation when the binary is missing.
 */
export async function startRedis(): Promise<TestRedis> {
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), 'sluice-redis-'));
  let child: ChildProcess | null;
  try {
    child = await launch(port, dir);
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    // A test process that dies early must not leave servers behind.
    process.once('exit', () => {
      for (const c of live) c.kill('SIGKILL');
    });
  }
  return {
    url: `redis://127.0.0.1:${port}`,
    port,
    async stop() {
      const c = child;
      child = null;
      if (c !== null) await kill(c);
      await rm(dir, { recursive: true, force: true });
    },
    async start() {
      if (child !== null) throw new Error('redis-server is already running');
      child = await launch(port, dir);
    },
    pause() {
      child?.kill('SIGSTOP');
    },
    resume() {
      child?.kill('SIGCONT');
    },
  };
}

async function launch(port: number, dir: string): Promise<ChildProcess> {
  await mkdir(dir, { recursive: true });
  const args = [
    '--port',
    String(port),
    '--bind',
    '127.0.0.1',
    '--save',
    '',
    '--appendonly',
    'no',
    '--dir',
    dir,
    '--loglevel',
    'warning',
  ];
  const child = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout?.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (output += d.toString()));
  const spawned = await new Promise<Error | null>((resolve) => {
    child.once('spawn', () => resolve(null));
    child.once('error', (err) => resolve(err));
  });
  if (spawned !== null) {
    const missing = (spawned as NodeJS.ErrnoException).code === 'ENOENT';
    throw new Error(
      missing
        ? 'redis-server was not found on PATH. The Redis integration tests need a real server: ' +
            `${INSTALL_HINT}; \`.ci/run\` installs it in CI.`
        : `redis-server could not be started: ${spawned.message}`,
    );
  }
  live.add(child);
  child.once('exit', () => live.delete(child));
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      throw new Error(`redis-server exited during startup on port ${port}:\n${output}`);
    }
    if (await answersPing(port)) return child;
    if (Date.now() > deadline) {
      await kill(child);
      throw new Error(`redis-server did not answer PING on port ${port} within ${READY_TIMEOUT_MS} ms`);
    }
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function kill(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  // A stopped process must be continued to act on SIGTERM.
  child.kill('SIGCONT');
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 2000);
  await exited;
  clearTimeout(timer);
}

/** True when a `PING` on a fresh connection gets `+PONG` within 500 ms. */
async function answersPing(port: number): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    let reply = '';
    const done = (ok: boolean): void => {
      clearTimeout(timer);
      socket.destroy();
      resolve(ok);
    };
    const timer = setTimeout(() => done(false), 500);
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.on('data', (d: Buffer) => {
      reply += d.toString();
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'));
    });
    socket.once('error', () => done(false));
  });
}

/**
 * `p`, or a rejection naming `what` once `ms` pass without it settling: a call to a frozen Redis
 * that never settles fails its test instead of hanging it.
 */
export async function settlesWithin<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: still waiting after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([p, late]);
  } finally {
    clearTimeout(timer);
  }
}
