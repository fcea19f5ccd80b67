/**
 * A fleet of simulated nodes in one process, one port each, sharing one profile; the entry point
 * tests, benchmarks and the `sluice sim` CLI use. It starts and stops nodes and nothing else.
 */

import { resolveSimProfile } from './profile-loader.js';
import type { SimProfile } from './profile.js';
import { startSimNode, type SimNode } from './sim-node.js';

/** How to start a fleet. */
export interface SimFleetOptions {
  /** Number of nodes, >= 1. */
  nodes: number;
  /** Bind address for every node. Default `127.0.0.1`. */
  address?: string;
  /** Port of node 0; node i listens on port + i. 0 or undefined: each node on a free port. */
  port?: number;
  /**
   * Profile name (`loadtest/profiles/NAME.yaml`), path to a YAML file, or a profile object (missing
   * keys take the defaults). Default `llama-8b-h100-bf16`.
   */
  profile?: string | SimProfile;
  /** Speed factor per node (modelled times are divided by it). Missing entries default to 1. */
  speedFactors?: number[];
}

/** A running fleet. */
export interface SimFleet {
  /** The nodes, in index order. */
  nodes: SimNode[];
  /** Base URLs of the nodes, `http://127.0.0.1:PORT`, in index order. */
  urls: string[];
  /** Stops every node. Idempotent. */
  close(): Promise<void>;
}

/**
 * Starts `nodes` simulated nodes. Rejects (after stopping any node already started) when the options
 * are invalid, the profile cannot be loaded, or a port cannot be bound.
 *
 * @example
 * const fleet = await startSimFleet({ nodes: 3, profile: 'fast' });
 * await fetch(`${fleet.urls[0]}/v1/models`);
 * await fleet.close();
 */
export async function startSimFleet(opts: SimFleetOptions): Promise<SimFleet> {
  if (!Number.isInteger(opts.nodes) || opts.nodes < 1) {
    throw new RangeError(`nodes must be a positive integer, got ${opts.nodes}`);
  }
  const port = opts.port ?? 0;
  if (!Number.isInteger(port) || port < 0 || port + opts.nodes - 1 > 65535) {
    throw new RangeError(`port must be 0 or a TCP port leaving room for ${opts.nodes} nodes, got ${port}`);
  }
  const speeds = opts.speedFactors ?? [];
  if (speeds.length > opts.nodes) {
    throw new RangeError(`got ${speeds.length} speed factors for ${opts.nodes} nodes`);
  }
  const profile = resolveSimProfile(opts.profile);
  const nodes: SimNode[] = [];
  try {
    for (let i = 0; i < opts.nodes; i++) {
      nodes.push(
        await startSimNode({
          profile,
          address: opts.address ?? '127.0.0.1',
          port: port === 0 ? 0 : port + i,
          speedFactor: speeds[i] ?? 1,
          index: i,
        }),
      );
    }
  } catch (err) {
    await Promise.all(nodes.map((n) => n.close()));
    throw err;
  }
  let closing: Promise<void> | null = null;
  return {
    nodes,
    urls: nodes.map((n) => n.url),
    close: () => (closing ??= Promise.all(nodes.map((n) => n.close())).then(() => undefined)),
  };
}
