/**
 * The proxy benchmark's child processes: `stand-in` (the upstream node) and `bare-forwarder` (the
 * baseline proxy), each started pinned to a CPU by the benchmark and stopped by SIGTERM. Each prints
 * `listening on http://127.0.0.1:PORT` once ready, and exits by itself if the benchmark that started
 * it is gone (so a killed benchmark leaves nothing behind).
 *
 *   node dist/loadtest/bench/bench-child.js stand-in [--port 0] [--delay-ms 0] [--chunk-gap-ms 0]
 *   node dist/loadtest/bench/bench-child.js bare-forwarder --upstream URL [--port 0] [--connections 256]
 */
import { startBareForwarder } from './bare-forwarder.js';
import { startStandIn } from './stand-in-node.js';

/** How often the child checks that its parent is still there, ms. */
const PARENT_CHECK_MS = 500;

/** `--name value` pairs; a missing name gives `fallback`. */
function option(args: readonly string[], name: string, fallback: string): string {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && i + 1 < args.length ? args[i + 1]! : fallback;
}

function numberOption(args: readonly string[], name: string, fallback: number): number {
  const v = Number(option(args, name, String(fallback)));
  if (!Number.isFinite(v) || v < 0) throw new Error(`--${name} must be a number >= 0`);
  return v;
}

async function run(argv: readonly string[]): Promise<number> {
  const [command, ...args] = argv;
  let close: () => unknown;
  let port: number;
  if (command === 'stand-in') {
    const s = await startStandIn({
      port: numberOption(args, 'port', 0),
      delayMs: numberOption(args, 'delay-ms', 0),
      chunkGapMs: numberOption(args, 'chunk-gap-ms', 0),
    });
    port = s.port;
    close = () => s.close();
  } else if (command === 'bare-forwarder') {
    const upstream = option(args, 'upstream', '');
    if (upstream === '') throw new Error('bare-forwarder needs --upstream URL');
    const f = await startBareForwarder({
      port: numberOption(args, 'port', 0),
      upstream,
      connections: numberOption(args, 'connections', 256),
    });
    port = f.port;
    close = () => f.close();
  } else {
    process.stderr.write('usage: bench-child.js stand-in|bare-forwarder [options]\n');
    return 2;
  }
  process.stdout.write(`${command} listening on http://127.0.0.1:${port}\n`);
  const parent = process.ppid;
  await new Promise<void>((resolve) => {
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
    setInterval(() => {
      if (process.ppid !== parent) resolve();
    }, PARENT_CHECK_MS).unref();
  });
  await close();
  return 0;
}

try {
  process.exit(await run(process.argv.slice(2)));
} catch (err) {
  process.stderr.write(`${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
}
