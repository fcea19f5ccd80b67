/**
 * The worker threads of `server.workers`, seen from the main thread: starts them, hands each config
 * the main thread applied on to them, forwards operator drains, merges what they report, and stops
 * them with the main thread's drain. Each worker runs the listeners on the ports the main thread
 * bound (`SO_REUSEPORT`: the kernel spreads new connections across the threads) with a plan
 * compiled from the same config (the main thread's loaded and checked config, copied: a worker
 * never parses or validates the file itself); worker-main.ts is the other side.
 */
import { SharedTable } from './shared-table.js';
import { Worker } from 'node:worker_threads';
import type { Logger } from './logger.js';
import type { StatsDelta } from '../metrics/stats-delta.js';
import type { OutcomeBatch } from './health-mirror.js';
import type { SluiceConfig } from '../../config/types.js';
import type { RelayedItem, RelayedResult } from './batch-relay.js';
import type { AdmissionAnswer, AdmissionEnd, AdmissionOffer } from './admission-relay.js';
import type { RelayedCallAbort, RelayedCallDone, RelayedCallStart } from './endpoint-relay.js';

/** What a worker starts from (its `workerData`). */
export interface WorkerBoot {
  /** 1 to workers - 1 (the main thread is 0). */
  index: number;
  configPath: string;
  /** The config the main thread runs, as loaded and checked there, and the digest of its text. */
  config: SluiceConfig;
  digest: string;
  /** The port each listener bound in the main thread, by listener name. */
  ports: Record<string, number>;
  /** The shared state table's buffer and size (shared-table.ts). */
  shared: SharedArrayBuffer;
  sharedSlots: number;
  /** The sticky sessions of every route (route/sticky-table.ts), shared by the threads. */
  sticky: SharedArrayBuffer;
  /** This worker's ledger of the shared counts it holds (`SharedTable.ledger`). */
  ledger: SharedArrayBuffer;
  /** How often the worker reports its metrics, ms. */
  reportMs: number;
}

/** Messages to a worker. */
export type ToWorker =
  | { t: 'reload'; id: number; config: SluiceConfig; digest: string }
  | { t: 'drain-node'; pool: string; node: string; drained: boolean }
  | { t: 'stop'; id: number; timeoutMs: number }
  | { t: 'report'; id: number }
  | { t: 'certificates'; id: number }
  | { t: 'stop-accepting'; id: number }
  | RelayedResult
  | RelayedCallDone
  | AdmissionAnswer;

/** Messages from a worker. */
export type FromWorker =
  | { t: 'ready' }
  | { t: 'failed'; message: string }
  | { t: 'log'; level: 'debug' | 'info' | 'warn' | 'error'; msg: string }
  | { t: 'reply'; id: number; errors: string[]; cut: number }
  | { t: 'stats'; delta: StatsDelta }
  | { t: 'outcomes'; batches: OutcomeBatch[] }
  | { t: 'access-log'; text: string }
  | RelayedItem
  | RelayedCallStart
  | RelayedCallAbort
  | AdmissionOffer
  | AdmissionEnd;

/** What the main thread does for the workers' requests that need its state. */
export interface MainThreadWork {
  /** Batches an item worker `index` relayed and answers it once (batch-relay.ts). */
  batchItem(index: number, m: RelayedItem, reply: (r: RelayedResult) => void): void;
  /** Answers a batch API request worker `index` passed on, once (endpoint-relay.ts). */
  endpointCall(index: number, m: RelayedCallStart, reply: (r: RelayedCallDone) => void): void;
  /** The client of worker `index`'s call `id` left. */
  endpointAbort(index: number, id: number): void;
  /** Offers worker `index`'s request to the main thread's admission of its pool (admission-relay.ts). */
  admissionOffer(index: number, m: AdmissionOffer, reply: (a: AdmissionAnswer) => void): void;
  /** Worker `index`'s request offered there ended. */
  admissionEnd(index: number, m: AdmissionEnd): void;
}

/**
 * A worker thread's young generation, MiB. V8's default let each worker's grow with the garbage of
 * its connections: 10,000 idle connections over two threads took Sluice to 197.5 MiB, 171.8 MiB
 * with this cap, for no CPU per request measurable in the proxy benchmark (docs/benchmarks.md,
 * "Idle keep-alive connections").
 */
const WORKER_YOUNG_GENERATION_MB = 8;
/** How long a worker gets to start (load the config, compile, bind), ms. */
const START_TIMEOUT_MS = 30_000;
/** How long a reload or a report may take in a worker before it counts as failed, ms. */
const REPLY_TIMEOUT_MS = 30_000;

interface Pending {
  resolve: (r: { errors: string[]; cut: number }) => void;
  timer: NodeJS.Timeout;
}

/** One worker thread and the requests waiting for its replies. */
class WorkerThread {
  readonly index: number;
  readonly worker: Worker;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  exited = false;

  constructor(index: number, worker: Worker) {
    this.index = index;
    this.worker = worker;
  }

  /** Sends `msg` with a fresh id and resolves with the reply (errors when none comes in `ms`). */
  ask(make: (id: number) => ToWorker, ms: number): Promise<{ errors: string[]; cut: number }> {
    if (this.exited) return Promise.resolve({ errors: [`worker ${this.index} is not running`], cut: 0 });
    const id = this.nextId++;
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        resolve({ errors: [`worker ${this.index} did not answer within ${ms} ms`], cut: 0 });
      }, ms);
      this.pending.set(id, { resolve, timer });
      this.worker.postMessage(make(id));
    });
  }

  replied(id: number, errors: string[], cut: number): void {
    const p = this.pending.get(id);
    if (p === undefined) return;
    this.pending.delete(id);
    clearTimeout(p.timer);
    p.resolve({ errors, cut });
  }

  /** The thread ended: every waiting request gets its answer now. */
  ended(): void {
    this.exited = true;
    for (const [id, p] of this.pending) {
      clearTimeout(p.timer);
      this.pending.delete(id);
      p.resolve({ errors: [`worker ${this.index} exited`], cut: 0 });
    }
  }
}

export class WorkerSet {
  private readonly threads: WorkerThread[] = [];
  private stopping = false;
  private readonly log: Logger;
  private readonly onStats: (index: number, delta: StatsDelta) => void;
  private readonly onOutcomes: (batches: OutcomeBatch[]) => void;
  private readonly onAccessLog: (text: string) => void;
  private readonly main: MainThreadWork;
  private readonly onDied: (index: number, ledger: Int32Array) => void;
  /** The config the workers run, and its digest (what a restarted worker starts from). */
  private config: SluiceConfig;
  private digest: string;
  private readonly boot: Omit<WorkerBoot, 'index' | 'config' | 'digest' | 'ledger'>;

  private constructor(
    boot: Omit<WorkerBoot, 'index' | 'ledger'>,
    log: Logger,
    onStats: (index: number, delta: StatsDelta) => void,
    onOutcomes: (batches: OutcomeBatch[]) => void,
    onAccessLog: (text: string) => void,
    main: MainThreadWork,
    onDied: (index: number, ledger: Int32Array) => void,
  ) {
    const { config, digest, ...rest } = boot;
    this.config = config;
    this.digest = digest;
    this.boot = rest;
    this.log = log;
    this.onStats = onStats;
    this.onOutcomes = onOutcomes;
    this.onAccessLog = onAccessLog;
    this.main = main;
    this.onDied = onDied;
  }

  /**
   * Starts `count` worker threads and resolves once every one serves; rejects (after stopping the
   * ones that started) when one cannot start.
   */
  static async start(
    count: number,
    boot: Omit<WorkerBoot, 'index' | 'ledger'>,
    log: Logger,
    onStats: (index: number, delta: StatsDelta) => void,
    onOutcomes: (batches: OutcomeBatch[]) => void,
    onAccessLog: (text: string) => void,
    main: MainThreadWork,
    onDied: (index: number, ledger: Int32Array) => void = () => undefined,
  ): Promise<WorkerSet> {
    const set = new WorkerSet(boot, log, onStats, onOutcomes, onAccessLog, main, onDied);
    const started = await Promise.allSettled(Array.from({ length: count }, (_, i) => set.spawn(i + 1)));
    const failed = started.find((r): r is PromiseRejectedResult => r.status === 'rejected');
    if (failed !== undefined) {
      // Stopped, not terminated: the workers that did start close their listeners first.
      await set.stop(0);
      throw failed.reason as Error;
    }
    return set;
  }

  /** Threads started (not counting the main thread). */
  get count(): number {
    return this.threads.length;
  }

  /** True while every worker runs. */
  get allRunning(): boolean {
    return this.threads.every((t) => !t.exited);
  }

  private spawn(index: number): Promise<void> {
    const ledger = new SharedArrayBuffer(SharedTable.ledgerBytes(this.boot.sharedSlots));
    const data: WorkerBoot = { ...this.boot, index, config: this.config, digest: this.digest, ledger };
    const worker = new Worker(new URL('./worker-main.js', import.meta.url), {
      workerData: data,
      execArgv: workerExecArgv(process.execArgv),
      resourceLimits: { maxYoungGenerationSizeMb: WORKER_YOUNG_GENERATION_MB },
    });
    const thread = new WorkerThread(index, worker);
    // The main thread's answers to this worker's relayed requests (one function for all of them);
    // a worker that ended meanwhile took the request with it: nothing to answer.
    const answer = (r: ToWorker): void => {
      if (!thread.exited) worker.postMessage(r);
    };
    const at = this.threads.findIndex((t) => t.index === index);
    if (at >= 0) this.threads[at] = thread;
    else this.threads.push(thread);
    return new Promise<void>((resolve, reject) => {
      let up = false;
      const timer = setTimeout(() => {
        if (up) return;
        reject(new Error(`worker ${index} did not start within ${START_TIMEOUT_MS} ms`));
        void worker.terminate();
      }, START_TIMEOUT_MS);
      worker.on('message', (m: FromWorker) => {
        switch (m.t) {
          case 'ready':
            up = true;
            clearTimeout(timer);
            resolve();
            return;
          case 'failed':
            clearTimeout(timer);
            reject(new Error(`worker ${index} could not start: ${m.message}`));
            return;
          case 'log':
            this.log[m.level](`worker ${index}: ${m.msg}`);
            return;
          case 'reply':
            thread.replied(m.id, m.errors, m.cut);
            return;
          case 'stats':
            this.onStats(index, m.delta);
            return;
          case 'outcomes':
            this.onOutcomes(m.batches);
            return;
          case 'access-log':
            this.onAccessLog(m.text);
            return;
          case 'batch-item':
            this.main.batchItem(index, m, answer);
            return;
          case 'endpoint':
            this.main.endpointCall(index, m, answer);
            return;
          case 'endpoint-abort':
            this.main.endpointAbort(index, m.id);
            return;
          case 'adm-offer':
            this.main.admissionOffer(index, m, answer);
            return;
          case 'adm-end':
            this.main.admissionEnd(index, m);
            return;
        }
      });
      worker.on('error', (e) => {
        this.log.error(`worker ${index}: ${e.stack ?? e.message}`);
      });
      worker.on('exit', (code) => {
        clearTimeout(timer);
        thread.ended();
        if (!up) {
          reject(new Error(`worker ${index} exited with code ${code} while starting`));
          return;
        }
        if (this.stopping) return;
        // A worker that died took its connections with it; what it held of the shared counts is
        // taken back, and a new one takes its share of new connections.
        this.onDied(index, new Int32Array(ledger));
        this.log.error(`worker ${index} exited with code ${code}; starting it again`);
        this.spawn(index).catch((e: Error) => this.log.error(`worker ${index}: ${e.message}`));
      });
    });
  }

  /**
   * Applies `config` (a config the main thread just applied; `digest`, its text's) in every worker.
   * Resolves to the errors of the workers that could not apply it (empty: all did).
   */
  async reload(config: SluiceConfig, digest: string): Promise<string[]> {
    this.config = config;
    this.digest = digest;
    const replies = await Promise.all(
      this.threads.map((t) => t.ask((id) => ({ t: 'reload', id, config, digest }), REPLY_TIMEOUT_MS)),
    );
    return replies.flatMap((r) => r.errors);
  }

  /**
   * Has every worker read its TLS listeners' certificate files again and swap in those that
   * changed (the main thread found a renewed file); resolves to the errors (empty: all did).
   */
  async certificates(): Promise<string[]> {
    const replies = await Promise.all(
      this.threads.map((t) => t.ask((id) => ({ t: 'certificates', id }), REPLY_TIMEOUT_MS)),
    );
    return replies.flatMap((r) => r.errors);
  }

  /** Has every worker close its listening sockets; resolves once each has (or did not answer). */
  async stopAccepting(): Promise<void> {
    await Promise.all(this.threads.map((t) => t.ask((id) => ({ t: 'stop-accepting', id }), 5000)));
  }

  /** Drains or undrains a node in every worker (the admin API). */
  drainNode(pool: string, node: string, drained: boolean): void {
    for (const t of this.threads)
      if (!t.exited) t.worker.postMessage({ t: 'drain-node', pool, node, drained });
  }

  /** Asks every worker for its metrics now; resolves once each has sent them (or failed to). */
  async report(): Promise<void> {
    await Promise.all(this.threads.map((t) => t.ask((id) => ({ t: 'report', id }), REPLY_TIMEOUT_MS)));
  }

  /**
   * Drains every worker as the main thread drains (new connections refused, requests in flight
   * finished up to `timeoutMs`) and lets them exit. Resolves to the number of requests the workers
   * ended at the deadline.
   */
  async stop(timeoutMs: number): Promise<number> {
    this.stopping = true;
    const replies = await Promise.all(
      this.threads.map((t) => t.ask((id) => ({ t: 'stop', id, timeoutMs }), timeoutMs + REPLY_TIMEOUT_MS)),
    );
    for (const r of replies) for (const e of r.errors) this.log.error(e);
    await this.terminate();
    return replies.reduce((n, r) => n + r.cut, 0);
  }

  /** Ends every worker now. */
  async terminate(): Promise<void> {
    this.stopping = true;
    await Promise.all(
      this.threads.map(async (t) => {
        if (t.exited) return;
        await new Promise<void>((resolve) => {
          t.worker.once('exit', () => resolve());
          void t.worker.terminate();
        });
      }),
    );
  }
}

/**
 * The process's Node options for a worker thread, without those that name the main script's source
 * (`-e CODE`, `-p CODE`, `--input-type`): a Sluice embedded in `node --input-type=module -e ...`
 * would otherwise start workers that Node refuses (`ERR_INPUT_TYPE_NOT_ALLOWED`) for a file.
 */
export function workerExecArgv(execArgv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < execArgv.length; i++) {
    const a = execArgv[i]!;
    if (a === '-e' || a === '--eval' || a === '-p' || a === '--print' || a === '--input-type') {
      i++; // and its value
      continue;
    }
    if (a.startsWith('--input-type=') || a.startsWith('--eval=') || a.startsWith('--print=')) continue;
    out.push(a);
  }
  return out;
}
