/**
 * `sluice sim`: parses the command line, starts a simulated fleet, prints where each node listens
 * and runs until SIGINT or SIGTERM. It never calls `process.exit`; the `sluice` bin decides that
 * from the returned exit code.
 */

import { startSimFleet } from './fleet.js';
import { DEFAULT_PROFILE_NAME } from './profile-loader.js';
import { SimProfileError } from './profile.js';

/** I/O seams for tests; defaults are the process streams and signals. */
export interface SimCliIo {
  /** Receives each stdout line (without newline). */
  stdout?: (line: string) => void;
  /** Receives each stderr line (without newline). */
  stderr?: (line: string) => void;
  /** Stops the fleet like SIGINT does. */
  signal?: AbortSignal;
}

/** Parsed `sluice sim` arguments. */
export interface SimCliArgs {
  /** `--nodes`, default 1. */
  nodes: number;
  /** `--port` of node 0, default 9100; 0 = free ports. */
  port: number;
  /** `--host`, default `127.0.0.1`. */
  host: string;
  /** `--profile` name or path, default `llama-8b-h100-bf16`. */
  profile: string;
  /** `--speed`, one per node; empty = all 1. */
  speedFactors: number[];
  /** `--help` / `-h` given. */
  help: boolean;
}

/** Usage text printed by `--help` and after an argument error. */
export const SIM_USAGE = [
  'usage: sluice sim [--nodes N] [--port P] [--host ADDR] [--profile NAME|PATH] [--speed F1,F2,...]',
  '  --nodes N      number of simulated nodes (default 1)',
  '  --port P       port of node 0; node i listens on P + i; 0 = free ports (default 9100)',
  '  --host ADDR    bind address (default 127.0.0.1)',
  `  --profile X    profile name in loadtest/profiles or a YAML path (default ${DEFAULT_PROFILE_NAME})`,
  '  --speed LIST   speed factor per node, or one for all (default 1)',
].join('\n');

/** An argument the CLI cannot accept. */
export class SimCliArgError extends Error {
  override readonly name = 'SimCliArgError';
}

function intArg(flag: string, raw: string, min: number, max: number): number {
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isInteger(n) || n < min || n > max) {
    throw new SimCliArgError(`${flag} must be an integer from ${min} to ${max}, got "${raw}"`);
  }
  return n;
}

/** Parses `sluice sim` arguments (without the leading `sim`). Throws `SimCliArgError` on a bad one. */
export function parseSimArgs(argv: readonly string[]): SimCliArgs {
  const out: SimCliArgs = {
    nodes: 1,
    port: 9100,
    host: '127.0.0.1',
    profile: DEFAULT_PROFILE_NAME,
    speedFactors: [],
    help: false,
  };
  let speedRaw: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i] as string;
    if (arg === '--help' || arg === '-h') {
      out.help = true;
      continue;
    }
    if (!arg.startsWith('--')) throw new SimCliArgError(`unexpected argument "${arg}"`);
    const eq = arg.indexOf('=');
    const flag = eq < 0 ? arg : arg.slice(0, eq);
    let value: string | undefined = eq < 0 ? undefined : arg.slice(eq + 1);
    if (!['--nodes', '--port', '--host', '--profile', '--speed'].includes(flag)) {
      throw new SimCliArgError(`unknown option ${flag}`);
    }
    if (value === undefined) {
      const next = argv[i + 1];
      if (next === undefined || next.startsWith('--')) throw new SimCliArgError(`${flag} needs a value`);
      value = next;
      i++;
    }
    if (flag === '--nodes') out.nodes = intArg(flag, value, 1, 4096);
    else if (flag === '--port') out.port = intArg(flag, value, 0, 65535);
    else if (flag === '--host') {
      if (value === '') throw new SimCliArgError('--host must not be empty');
      out.host = value;
    } else if (flag === '--profile') {
      if (value === '') throw new SimCliArgError('--profile must not be empty');
      out.profile = value;
    } else speedRaw = value;
  }
  if (out.port !== 0 && out.port + out.nodes - 1 > 65535) {
    throw new SimCliArgError(`--port ${out.port} leaves no room for ${out.nodes} nodes`);
  }
  if (speedRaw !== undefined) {
    const speeds = speedRaw.split(',').map((s) => Number(s.trim()));
    if (speeds.some((s) => !Number.isFinite(s) || s <= 0)) {
      throw new SimCliArgError(
        `--speed must be a comma-separated list of positive numbers, got "${speedRaw}"`,
      );
    }
    if (speeds.length !== 1 && speeds.length !== out.nodes) {
      throw new SimCliArgError(
        `--speed has ${speeds.length} values for ${out.nodes} nodes (give one or one per node)`,
      );
    }
    out.speedFactors = speeds.length === 1 ? new Array<number>(out.nodes).fill(speeds[0] as number) : speeds;
  }
  return out;
}

function waitForStop(signal: AbortSignal | undefined): Promise<void> {
  return new Promise<void>((resolve) => {
    const stop = (): void => {
      process.off('SIGINT', stop);
      process.off('SIGTERM', stop);
      signal?.removeEventListener('abort', stop);
      resolve();
    };
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
    signal?.addEventListener('abort', stop, { once: true });
    if (signal?.aborted === true) stop();
  });
}

/**
 * Runs `sluice sim` with `argv` (the arguments after `sim`). Resolves 0 after a clean stop on
 * SIGINT/SIGTERM, 2 on bad arguments or an unusable profile, 1 when the fleet cannot start.
 */
export async function runSimCli(argv: string[], io: SimCliIo = {}): Promise<number> {
  const stdout = io.stdout ?? ((line: string) => void process.stdout.write(`${line}\n`));
  const stderr = io.stderr ?? ((line: string) => void process.stderr.write(`${line}\n`));
  let args: SimCliArgs;
  try {
    args = parseSimArgs(argv[0] === 'sim' ? argv.slice(1) : argv);
  } catch (err) {
    if (!(err instanceof SimCliArgError)) throw err;
    stderr(`sluice sim: ${err.message}`);
    stderr(SIM_USAGE);
    return 2;
  }
  if (args.help) {
    stdout(SIM_USAGE);
    return 0;
  }
  let fleet;
  try {
    fleet = await startSimFleet({
      nodes: args.nodes,
      address: args.host,
      port: args.port,
      profile: args.profile,
      speedFactors: args.speedFactors,
    });
  } catch (err) {
    stderr(`sluice sim: ${err instanceof Error ? err.message : String(err)}`);
    return err instanceof SimProfileError ? 2 : 1;
  }
  fleet.urls.forEach((url, i) => stdout(`node ${i} listening on ${url}`));
  await waitForStop(io.signal);
  await fleet.close();
  return 0;
}
