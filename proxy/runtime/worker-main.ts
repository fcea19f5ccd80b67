/**
 * A worker thread of `server.workers`: runs the config the main thread loaded and checked, serves the
 * listeners on the ports the main thread bound, and answers the main thread's messages (reloads,
 * operator drains, metric reports, the drain at shutdown). Its log lines go to the main thread's
 * logger. See worker-set.ts for the other side.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { loadCheckedPlugins } from '../../config/loader.js';
import { SharedTable } from './shared-table.js';
import { levelFromEnv, LogLevel, type Logger } from './logger.js';
import { Sluice } from './sluice.js';
import { HEALTH_MIRROR_MS } from './health-mirror.js';
import type { FromWorker, ToWorker, WorkerBoot } from './worker-set.js';
import { BatchRelayClient } from './batch-relay.js';
import { EndpointRelayClient } from './endpoint-relay.js';
import { AdmissionRelayClient } from './admission-relay.js';
import { batchApiOwns } from '../batch-api/batch-api.js';

const boot = workerData as WorkerBoot;
const port = parentPort!;
const post = (m: FromWorker): void => port.postMessage(m);
const relay = new BatchRelayClient(post);
// The batch API's requests are answered by the main thread, which runs its stores and job worker.
const endpoints = boot.config.batch_api === undefined ? null : new EndpointRelayClient(post, batchApiOwns);
const admissions = new AdmissionRelayClient(post);

const min = LogLevel[levelFromEnv('info')];
const log: Logger = {
  debug: (msg) => {
    if (min <= LogLevel.debug) post({ t: 'log', level: 'debug', msg });
  },
  info: (msg) => post({ t: 'log', level: 'info', msg }),
  warn: (msg) => post({ t: 'log', level: 'warn', msg }),
  error: (msg) => post({ t: 'log', level: 'error', msg }),
};

async function run(): Promise<void> {
  const loaded = await loadCheckedPlugins(boot.config, boot.configPath);
  if (!loaded.ok) {
    post({ t: 'failed', message: loaded.errors.join('\n') });
    return;
  }
  const sluice = new Sluice(
    boot.configPath,
    log,
    new SharedTable({
      buffer: boot.shared,
      slots: boot.sharedSlots,
      ledger: boot.ledger,
      thread: boot.index,
    }),
    boot.sticky,
  );
  try {
    // Access-log lines go to the main thread, the one writer of the log (lines from several
    // threads written to one pipe could interleave).
    sluice.accessLogRelay = (text) => post({ t: 'access-log', text });
    // Batching routes' items are batched by the main thread (batch-relay.ts).
    sluice.batchRelay = relay;
    sluice.endpointRelay = endpoints;
    // Pools with a reserve are admitted by the main thread's controller (admission-relay.ts).
    sluice.runtime.admissionRelay = admissions;
    await sluice.startWorker(boot.config, boot.digest, loaded.plugins, boot.ports);
  } catch (e) {
    post({ t: 'failed', message: (e as Error).message });
    return;
  }
  const report = (): void => post({ t: 'stats', delta: sluice.takeReport() });
  const timer = setInterval(report, boot.reportMs);
  const healthStep = (): void => {
    const batches = sluice.healthStep();
    if (batches !== null) post({ t: 'outcomes', batches });
  };
  const health = setInterval(healthStep, HEALTH_MIRROR_MS);
  let stopping = false;
  // An exception nothing caught ends this thread, never the process: Node would end the thread with
  // uWS's sockets still open in its loop, which aborts the whole process (uv_loop_close with open
  // handles). Everything this thread holds is closed first (its requests in flight are cut), then
  // the thread ends; the main thread takes back what it held of the shared counts and starts
  // another.
  process.on('uncaughtException', (e: Error) => {
    log.error(`uncaught exception, the thread ends: ${e.stack ?? e.message}`);
    if (stopping) return;
    stopping = true;
    clearInterval(timer);
    clearInterval(health);
    void sluice.close().finally(() => {
      port.close();
      // Any handle left (a plugin's timer) must not keep a dead thread alive.
      setTimeout(() => process.exit(1), 1000).unref();
    });
  });
  /** Answers request `id` with the errors `work` resolves to (or its failure), named by this worker. */
  const replyWith = (id: number, work: Promise<string[]>): void => {
    void work.then(
      (errors) => post({ t: 'reply', id, errors: errors.map((e) => `worker ${boot.index}: ${e}`), cut: 0 }),
      (e: unknown) => post({ t: 'reply', id, errors: [`worker ${boot.index}: ${String(e)}`], cut: 0 }),
    );
  };
  port.on('message', (m: ToWorker) => {
    switch (m.t) {
      case 'batch-done':
        relay.done(m);
        return;
      case 'endpoint-done':
        endpoints?.done(m);
        return;
      case 'adm-admitted':
      case 'adm-rejected':
        admissions.answered(m);
        return;
      case 'reload':
        replyWith(m.id, sluice.applyWorkerConfig(m.config, m.digest));
        return;
      case 'certificates':
        replyWith(m.id, sluice.refreshCertificates());
        return;
      case 'stop-accepting':
        sluice.stopAccepting();
        post({ t: 'reply', id: m.id, errors: [], cut: 0 });
        return;
      case 'drain-node':
        sluice.drainNode(m.pool, m.node, m.drained);
        return;
      case 'report':
        report();
        post({ t: 'reply', id: m.id, errors: [], cut: 0 });
        return;
      case 'stop':
        if (stopping) return;
        stopping = true;
        clearInterval(timer);
        clearInterval(health);
        void sluice.drainRequests(m.timeoutMs).then(
          async (cut) => {
            // What the last requests counted, before the thread ends.
            report();
            healthStep();
            await sluice.close();
            post({ t: 'reply', id: m.id, errors: [], cut });
            port.close();
          },
          (e: unknown) => {
            post({ t: 'reply', id: m.id, errors: [`worker ${boot.index}: ${String(e)}`], cut: 0 });
            port.close();
          },
        );
        return;
    }
  });
  post({ t: 'ready' });
}

run().catch((e: unknown) =>
  post({ t: 'failed', message: e instanceof Error ? (e.stack ?? e.message) : String(e) }),
);
