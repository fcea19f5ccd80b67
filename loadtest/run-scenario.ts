/**
 * Runs a loaded scenario: for each variant, starts its simulated fleet and its Sluice child, checks
 * the target answers, runs the warm-up and the measured phase with the right driver (open loop,
 * closed loop with the SSE client, or autocannon), samples the nodes' counters around the measured
 * phase and builds the result. Everything it starts it stops, whatever happens.
 */

import { HttpSender } from './client/http-sender.js';
import { checkReachable } from './client/preflight.js';
import { runAutocannonLoop } from './drive/autocannon-loop.js';
import { runClosedLoop } from './drive/closed-loop.js';
import { offeredRate, runOpenLoop } from './drive/open-loop.js';
import type { Phase } from './drive/phase.js';
import { startProgress } from './drive/progress.js';
import { Recorder } from './drive/recorder.js';
import { startFleet, type FleetHandle } from './env/fleet-handle.js';
import { freePort } from './env/free-port.js';
import { metricsProbe, type NodeProbe, type NodeSample } from './env/node-probe.js';
import { startSluiceChild, type SluiceChild } from './env/sluice-process.js';
import { parsePromText } from './env/prom-text.js';
import { LoadtestError, LoadtestErrorCode } from './loadtest-error.js';
import { buildResult } from './report/build-result.js';
import type { LoadtestResult } from './report/result.js';
import { expandTemplate } from './scenario/sluice-config-template.js';
import type { RunSpec, Scenario } from './scenario/scenario-types.js';
import { RequestSource, statsSince } from './workload/request-source.js';

/** Options of a run. */
export interface RunOptions {
  /** Run only this variant (by name); default: every variant in turn. */
  variant?: string;
  /** Replaces the scenario's `duration_s`. */
  durationS?: number;
  /** Receives progress and status lines; default none. */
  log?: (line: string) => void;
  /** Warnings (a node_metrics URL that cannot be read), shown even when progress is not. Default: `log`. */
  warn?: (line: string) => void;
  /**
   * Stops sending early (e.g. on Ctrl-C); the results so far are reported. Aborted before the
   * measured phase starts (during the warm-up), the variant rejects with `SLUICE_LOADTEST_INTERRUPTED`.
   */
  signal?: AbortSignal;
}

/** Context length assumed for targets whose profile is unknown, tokens. */
const UNKNOWN_MAX_MODEL_LEN = 32_768;

type Driver = LoadtestResult['load']['driver'];

function driverFor(spec: RunSpec): Driver {
  if (spec.load.mode === 'open') return 'open-loop';
  const streams = spec.workload.mix.some((m) => m.kind === 'chat' && m.stream);
  return streams ? 'closed-loop' : 'autocannon';
}

async function runPhase(spec: RunSpec, driver: Driver, phase: Phase, origins: string[]): Promise<void> {
  if (driver === 'open-loop') return runOpenLoop(phase, spec.workload, spec.load, spec.seed);
  if (driver === 'closed-loop') return runClosedLoop(phase, spec.load.connections);
  return runAutocannonLoop(phase, origins, spec.load.connections, spec.timeoutMs);
}

/** Runs one variant; resolves to its result, or rejects with a `LoadtestError` (refused target, start failure). */
export async function runVariant(spec: RunSpec, opts: RunOptions = {}): Promise<LoadtestResult> {
  const log = opts.log ?? (() => undefined);
  const signal = opts.signal ?? new AbortController().signal;
  const durationMs = (opts.durationS ?? spec.durationS) * 1000;
  let fleet: FleetHandle | null = null;
  let sluice: SluiceChild | null = null;
  /** Every Sluice child of the run (`sluice.instances`); `sluice` is the first. */
  const sluices: SluiceChild[] = [];
  let sender: HttpSender | null = null;
  /** Admin API of every Sluice child, in `sluices` order. */
  const adminUrls: string[] = [];
  try {
    if (spec.fleet !== null) {
      fleet = await startFleet(spec.fleet);
      log(
        `fleet: ${spec.fleet.nodes} nodes (${spec.fleet.profile.name}, ${spec.fleet.process}) at ${fleet.urls.join(' ')}`,
      );
    }
    if (spec.sluice !== null) {
      for (let i = 0; i < spec.sluice.instances; i++) {
        const adminPort = await freePort();
        const text = expandTemplate(spec.sluice.template, {
          nodeUrls: fleet?.urls ?? [],
          port: await freePort(),
          adminPort,
        });
        const child = await startSluiceChild(text, spec.sluice.listener);
        sluices.push(child);
        adminUrls.push(`http://127.0.0.1:${adminPort}`);
        log(`sluice: pid ${child.pid ?? '?'} listening on ${child.url}`);
      }
      sluice = sluices[0] ?? null;
    }
    // Several instances: the sender takes the origins in turn, so consecutive requests (and the
    // turns of one conversation) alternate between instances that share nothing.
    const origins =
      sluice !== null
        ? sluices.map((s) => s.url)
        : spec.target !== null
          ? [spec.target]
          : (fleet?.urls ?? []);
    const targetKind = sluice !== null ? 'sluice' : spec.target !== null ? 'external' : 'direct';
    const probe: NodeProbe | null =
      fleet?.probe ??
      (spec.nodeMetrics.length > 0 ? metricsProbe(spec.nodeMetrics, null, opts.warn ?? log) : null);
    for (const origin of origins) await checkReachable(origin);

    const driver = driverFor(spec);
    const source = new RequestSource(
      spec.workload,
      spec.seed,
      spec.fleet?.profile.max_model_len ?? UNKNOWN_MAX_MODEL_LEN,
    );
    const connections = spec.load.mode === 'open' ? spec.load.maxInFlight : spec.load.connections;
    sender = new HttpSender(origins, connections, spec.timeoutMs);
    const label = `${spec.scenario}/${spec.variant}`;
    const makePhase = (ms: number, recorder: Recorder): Phase => ({
      source,
      sender: sender as HttpSender,
      recorder,
      durationMs: ms,
      maxRequests: spec.maxRequests,
      drainMs: spec.drainS * 1000,
      signal,
      stoppedAt: null,
    });
    const inFlight = driver === 'autocannon' ? () => null : () => sender?.active ?? 0;
    const warmsUp = spec.warmupS > 0 && !signal.aborted;
    if (warmsUp) {
      const warm = new Recorder(spec.workload.tenants.length, performance.now());
      const stop = startProgress(`${label} warm-up`, warm, spec.warmupS * 1000, inFlight, log);
      await runPhase(spec, driver, makePhase(spec.warmupS * 1000, warm), origins).finally(stop);
      if (warm.targetRefused()) throw refused(origins);
    }
    // Nothing measured yet: an empty result would report nothing and replace an earlier one's files.
    if (signal.aborted) {
      throw new LoadtestError(
        LoadtestErrorCode.interrupted,
        `${label}: interrupted ${warmsUp ? 'during warm-up' : 'before the measured phase'}; nothing measured, no result files written`,
      );
    }
    const before: NodeSample[] = (await probe?.sample()) ?? [];
    const cpuBefore = await sluicesCpu(sluices);
    const pluginsBefore = await pluginSeries(adminUrls);
    const startedAt = new Date();
    const recorder = new Recorder(spec.workload.tenants.length, performance.now());
    // The source served the warm-up too: the result counts the measured phase's sessions only.
    const sourceBefore = source.stats();
    const phase = makePhase(durationMs, recorder);
    const stop = startProgress(label, recorder, durationMs, inFlight, log);
    await runPhase(spec, driver, phase, origins).finally(stop);
    const wallMs = performance.now() - recorder.phaseStart;
    const after: NodeSample[] = (await probe?.sample()) ?? [];
    const cpuAfter = await sluicesCpu(sluices);
    const pluginsAfter = await pluginSeries(adminUrls);
    if (recorder.targetRefused()) throw refused(origins);
    const sendingMs = (phase.stoppedAt ?? recorder.phaseStart + durationMs) - recorder.phaseStart;
    return buildResult(recorder, {
      spec,
      driver,
      offeredRate: spec.load.mode === 'open' ? offeredRate(spec.workload, spec.load) : null,
      startedAt,
      sendingMs: Math.max(1, sendingMs),
      wallMs,
      targetKind,
      targetUrls: origins,
      sluiceCpuS: cpuBefore === null || cpuAfter === null ? null : cpuAfter - cpuBefore,
      nodesBefore: before,
      nodesAfter: after,
      source: statsSince(sourceBefore, source.stats()),
      stoppedEarly: signal.aborted ? 'interrupted' : null,
      ...(pluginsAfter === null || pluginsAfter.size === 0
        ? {}
        : { pluginMetrics: pluginDelta(pluginsBefore, pluginsAfter) }),
    });
  } finally {
    sender?.abortAll();
    await sender?.close();
    for (const s of sluices) await s.stop();
    await fleet?.close();
  }
}

/** CPU seconds of every Sluice child together; null without any (or when one cannot be read). */
async function sluicesCpu(sluices: readonly SluiceChild[]): Promise<number | null> {
  if (sluices.length === 0) return null;
  let total = 0;
  for (const s of sluices) {
    const cpu = await s.cpuSeconds();
    if (cpu === null) return null;
    total += cpu;
  }
  return total;
}

/**
 * The `sluice_plugin_*` series of the Sluice admin APIs (`name{labels}` → value, summed over the
 * instances), or null without any or when one is unreadable.
 */
async function pluginSeries(adminUrls: readonly string[]): Promise<Map<string, number> | null> {
  if (adminUrls.length === 0) return null;
  try {
    const out = new Map<string, number>();
    for (const adminUrl of adminUrls) {
      const text = await (await fetch(`${adminUrl}/metrics`)).text();
      for (const s of parsePromText(text)) {
        if (!s.name.startsWith('sluice_plugin_')) continue;
        const labels = Object.entries(s.labels)
          .map(([k, v]) => `${k}="${v}"`)
          .join(',');
        const key = labels === '' ? s.name : `${s.name}{${labels}}`;
        out.set(key, (out.get(key) ?? 0) + s.value);
      }
    }
    return out;
  } catch {
    return null;
  }
}

/** Counters (`_total`) as the difference over the phase; gauges as their last value. */
function pluginDelta(before: Map<string, number> | null, after: Map<string, number>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of after) {
    const counter = k.split('{')[0]!.endsWith('_total');
    out[k] = counter ? v - (before?.get(k) ?? 0) : v;
  }
  return out;
}

function refused(origins: string[]): LoadtestError {
  return new LoadtestError(
    LoadtestErrorCode.targetRefused,
    `${origins.join(', ')} refused every connection (ECONNREFUSED) and nothing succeeded; the run was stopped`,
  );
}

/**
 * Runs the scenario's variants in turn (or the one named in `opts.variant`). Rejects with
 * `SLUICE_LOADTEST_INTERRUPTED` when interrupted before anything was measured; interrupted before a
 * later variant's measured phase, it resolves to the variants measured so far.
 */
export async function runScenario(scenario: Scenario, opts: RunOptions = {}): Promise<LoadtestResult[]> {
  const runs =
    opts.variant === undefined ? scenario.runs : scenario.runs.filter((r) => r.variant === opts.variant);
  if (runs.length === 0) {
    throw new LoadtestError(
      LoadtestErrorCode.usage,
      `scenario ${scenario.name} has no variant "${opts.variant ?? ''}"; variants: ${scenario.runs.map((r) => r.variant).join(', ')}`,
    );
  }
  const results: LoadtestResult[] = [];
  for (const spec of runs) {
    if (opts.signal?.aborted === true) break;
    try {
      results.push(await runVariant(spec, opts));
    } catch (err) {
      // The variants measured before the interruption are still reported.
      const interrupted = err instanceof LoadtestError && err.code === LoadtestErrorCode.interrupted;
      if (!interrupted || results.length === 0) throw err;
      (opts.warn ?? opts.log)?.(`sluice loadtest: ${err.message}`);
      break;
    }
  }
  // Only an interruption before the first variant leaves nothing.
  if (results.length === 0) {
    throw new LoadtestError(
      LoadtestErrorCode.interrupted,
      `${scenario.name}: interrupted before the first variant started; nothing measured, no result files written`,
    );
  }
  return results;
}
