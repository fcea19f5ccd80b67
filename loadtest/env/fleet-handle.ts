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
import { spawnChild, stopChild } from './child-process.js';
import { inProcessProbe, metricsProbe, type NodeProbe } from './node-probe.js';

/** A running fleet. */
export interface FleetHandle {
  /** Base URLs in node order. */
  urls: string[];
  probe: NodeProbe;
  /** Stops the nodes. */
  close(): Promise<void>;
}

const NODE_LINE = /^node (\d+) listening on (http:\/\/\S+)/;

async function startChildFleet(spec: FleetSpec, timeoutMs: number): Promise<FleetHandle> {
  const dir = await mkdtemp(join(tmpdir(), 'sluice-loadtest-sim-'));
  const profileFile = join(dir, 'profile.yaml');
  await writeFile(profileFile, stringify(spec.profile));
  const urls: string[] = [];
  let ready!: () => void;
  const up = new Promise<void>((resolve) => (ready = resolve));
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
  const child = spawnChild(args, (line) => {
    const m = NODE_LINE.exec(line);
    if (m === null) return;
    urls[Number(m[1])] = m[2] as string;
    if (urls.filter((u) => u !== undefined).length === spec.nodes) ready();
  });
  const close = async (): Promise<void> => {
    await stopChild(child);
    await rm(dir, { recursive: true, force: true });
  };
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    up.then(() => 'up'),
    child.exited.then((code) => `exited with ${code}`),
    new Promise<string>(
      (resolve) => (timer = setTimeout(resolve, timeoutMs, `did not start within ${timeoutMs} ms`)),
    ),
  ]);
  clearTimeout(timer);
  if (outcome !== 'up') {
    await close();
    throw new LoadtestError(
      LoadtestErrorCode.fleetStartFailed,
      `the simulated fleet (child process) ${outcome}; its last output:`,
      child.tail,
    );
  }
  return { urls, probe: metricsProbe(urls, spec.profile.max_running), close };
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
