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
import { startChild, stopChild } from './child-process.js';
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
  let listed = 0;
  const isReady = (line: string): boolean => {
    const m = NODE_LINE.exec(line);
    if (m !== null) {
      urls[Number(m[1])] = m[2] as string;
      listed++;
    }
    return listed === spec.nodes;
  };
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
