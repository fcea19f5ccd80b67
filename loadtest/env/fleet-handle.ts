/**
 * Starts the scenario's simulated fleet, in this process (`startSimFleet`) or in a `sluice sim`
 * child process (the profile written to a temp YAML file), and gives back its node URLs, a probe
 * for its counters and a way to stop it.
 */

import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { stringify } from 'yaml';
import { LoadtestError, LoadtestErrorCode } from '../loadtest-error.js';
import type { FleetSpec } from '../scenario/scenario-types.js';
import { startSimFleet } from '../sim/fleet.js';
import { startChild, stopChild, type Child } from './child-process.js';
import { inProcessProbe, metricsProbe, type NodeProbe } from './node-probe.js';

/** A running fleet. */
export interface FleetHandle {
  /** Base URLs in node order. */
  urls: string[];
  probe: NodeProbe;
  /** Process id of the `sluice sim` child; undefined when the nodes run in this process. */
  pid?: number;
  /** Stops the nodes. */
  close(): Promise<void>;
}

const NODE_LINE = /^node (\d+) listening on (http:\/\/\S+)/;

/**
 * A `startChild` readiness check for `sluice sim`: fills `urls` (in node order) from the child's
 * `node N listening on URL` lines, and says ready once `nodes` are listed.
 */
function nodeLines(urls: string[], nodes: number): (line: string) => boolean {
  let listed = 0;
  return (line) => {
    const m = NODE_LINE.exec(line);
    if (m !== null) {
      urls[Number(m[1])] = m[2] as string;
      listed++;
    }
    return listed === nodes;
  };
}

/**
 * Starts `sluice sim` as a child with `nodes` nodes of the built-in `profile` on free loopback
 * ports: the child and its node URLs in order. Rejects with `SLUICE_LOADTEST_FLEET_START_FAILED`.
 */
export async function startSimChild(
  nodes: number,
  profile: string,
  timeoutMs = 30_000,
): Promise<{ child: Child; urls: string[] }> {
  const urls: string[] = [];
  const child = await startChild(
    ['sim', '--nodes', String(nodes), '--port', '0', '--host', '127.0.0.1', '--profile', profile],
    nodeLines(urls, nodes),
    { code: LoadtestErrorCode.fleetStartFailed, what: 'the simulated fleet' },
    timeoutMs,
  );
  return { child, urls };
}

async function startChildFleet(spec: FleetSpec, timeoutMs: number): Promise<FleetHandle> {
  const dir = await mkdtemp(join(tmpdir(), 'sluice-loadtest-sim-'));
  const profileFile = join(dir, 'profile.yaml');
  const args = [
    'sim',
    '--nodes',
    String(spec.nodes),
    '--port',
    '0',
    '--host',
    '127.0.0.1',
    '--profile',
    profileFile,
    '--speed',
    spec.speedFactors.join(','),
  ];
  const urls: string[] = [];
  const isReady = nodeLines(urls, spec.nodes);
  const failure = {
    code: LoadtestErrorCode.fleetStartFailed,
    what: 'the simulated fleet (child process)',
  };
  const child = await writeFile(profileFile, stringify(spec.profile))
    .then(() => startChild(args, isReady, failure, timeoutMs))
    .catch(async (err: unknown) => {
      await rm(dir, { recursive: true, force: true });
      throw err;
    });
  const close = async (): Promise<void> => {
    await stopChild(child);
    await rm(dir, { recursive: true, force: true });
  };
  return { urls, probe: metricsProbe(urls, spec.profile.max_running), pid: child.process.pid, close };
}

/** One simulated node of the `fast` profile in a child process: the stand-in node of the benchmarks. */
export async function startOneFastNode(): Promise<FleetHandle> {
  const { loadSimProfile } = await import('../sim/profile-loader.js');
  return startFleet({ nodes: 1, profile: loadSimProfile('fast'), speedFactors: [1], process: 'child' });
}

/** Starts the fleet `spec` describes on free loopback ports. Rejects with `SLUICE_LOADTEST_FLEET_START_FAILED`. */
export async function startFleet(spec: FleetSpec, timeoutMs = 15_000): Promise<FleetHandle> {
  if (spec.process === 'child') return startChildFleet(spec, timeoutMs);
  try {
    const fleet = await startSimFleet({
      nodes: spec.nodes,
      profile: spec.profile,
      speedFactors: spec.speedFactors,
      address: '127.0.0.1',
    });
    return { urls: fleet.urls, probe: inProcessProbe(fleet.nodes), close: () => fleet.close() };
  } catch (err) {
    throw new LoadtestError(
      LoadtestErrorCode.fleetStartFailed,
      `the simulated fleet did not start: ${(err as Error).message}`,
    );
  }
}
