/**
 * `sluice serve`: starts Sluice from a config file and wires the process signals: SIGHUP reloads,
 * SIGTERM and SIGINT drain in-flight requests (up to `server.drain_timeout_ms`) and exit 0. Once
 * the drain has begun, further SIGTERM, SIGINT and SIGHUP are logged and change nothing. A SIGHUP
 * during startup is held (`held-hangups.ts`) and reloads once Sluice serves; SIGTERM and SIGINT
 * before then keep Node's default action and end the process, with nothing in flight to cut.
 */
import { resolve } from 'node:path';
import { ConfigInvalidError, startSluice } from '../runtime/sluice.js';
import { createLogger, levelFromEnv } from '../runtime/logger.js';
import { tuneV8 } from '../runtime/v8-tuning.js';
import { nowMs } from '../lifecycle/clock.js';
import { holdHangups, takeHeldHangups } from './held-hangups.js';

interface ServeArgs {
  config: string;
  watch: boolean;
  /** `--cores N`: the cores `server.workers: auto` counts, instead of the machine's. */
  cores: number | undefined;
}

function parseArgs(argv: string[], defaultConfig: string): ServeArgs | string {
  let config = defaultConfig;
  let watch = true;
  let cores: number | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--config' || a === '-c') {
      const v = argv[++i];
      if (v === undefined) return `${a} needs a file`;
      config = v;
    } else if (a?.startsWith('--config=')) config = a.slice('--config='.length);
    else if (a === '--no-watch') watch = false;
    else if (a === '--cores' || a?.startsWith('--cores=')) {
      const v = a === '--cores' ? argv[++i] : a.slice('--cores='.length);
      const n = Number(v);
      if (v === undefined || v === '' || !Number.isInteger(n) || n < 1 || n > 1024)
        return `--cores needs a whole number of cores from 1 to 1024 (got ${v === undefined ? 'nothing' : JSON.stringify(v)})`;
      cores = n;
    } else return `unknown option ${a ?? ''}`;
  }
  return { config: resolve(config), watch, cores };
}

/** Runs until a termination signal; resolves to the exit code. */
export async function runServe(argv: string[], defaultConfig: string): Promise<number> {
  const args = parseArgs(argv, defaultConfig);
  if (typeof args === 'string') {
    process.stderr.write(
      `sluice serve: ${args}\nusage: sluice serve [--config FILE] [--no-watch] [--cores N]\n`,
    );
    return 2;
  }
  holdHangups();
  tuneV8();
  const log = createLogger(levelFromEnv('info'));
  let sluice;
  try {
    sluice = await startSluice({
      configPath: args.config,
      watch: args.watch,
      logger: log,
      ...(args.cores === undefined ? {} : { cores: args.cores }),
    });
  } catch (e) {
    if (e instanceof ConfigInvalidError) {
      process.stderr.write(`sluice serve: ${args.config} is not a valid config:\n${e.errors.join('\n')}\n`);
      return 1;
    }
    process.stderr.write(`sluice serve: ${(e as Error).message}\n`);
    return 1;
  }
  for (const l of sluice.listeners) {
    const host = l.address === '0.0.0.0' || l.address === '::' ? '127.0.0.1' : l.address;
    log.info(
      `listener ${l.name} on ${l.address}:${l.port}: send OpenAI-style traffic to http://${host}:${l.port}/v1`,
    );
  }
  const admin = sluice.current.config.admin;
  log.info(
    `admin API on http://${admin.address}:${sluice.adminPort} (status page at /; /healthz /readyz /metrics /admin/stats /admin/histograms /admin/config /admin/nodes /admin/capacity; POST /admin/reload, /admin/nodes/POOL/NODE/drain)`,
  );
  log.info(
    `config ${args.config} version ${sluice.current.version}; ${args.watch ? 'edit it to reload, or send SIGHUP' : 'not watched (--no-watch): send SIGHUP or POST /admin/reload to reload it'}`,
  );

  // One handler for the three signals, installed before the startup hold is let go and kept until
  // the process exits: a signal without a handler would kill the process (Node's default action)
  // and cut whatever is in flight.
  let timeout = 0; // ms, the drain_timeout_ms in force when the drain began
  let deadline = -1; // ms (monotonic) when the drain cuts what is left; -1 while serving
  const signal = await new Promise<NodeJS.Signals>((res) => {
    const onSignal = (s: NodeJS.Signals): void => {
      if (deadline < 0) {
        if (s === 'SIGHUP') void sluice.reload();
        else {
          timeout = sluice.current.config.server.drain_timeout_ms;
          deadline = nowMs() + timeout;
          res(s);
        }
        return;
      }
      const left = Math.max(0, Math.round(deadline - nowMs()));
      const state = `${sluice.stats.inFlightAll} in flight, deadline in ${left} ms`;
      log.info(
        s === 'SIGHUP' ? `SIGHUP: ignored while draining (${state})` : `${s}: already draining (${state})`,
      );
    };
    process.on('SIGHUP', onSignal);
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
    if (takeHeldHangups()) {
      log.info('SIGHUP received during startup: reloading now');
      void sluice.reload();
    }
  });
  await sluice.stopAcceptingAll();
  log.info(`${signal}: draining ${await sluice.inFlightNow()} in-flight requests (up to ${timeout} ms)`);
  const cut = await sluice.drain(timeout);
  if (cut === 0) log.info('drained; exiting');
  else {
    log.warn(
      `drain deadline reached with ${cut} requests still running; they were ended (503 server_shutting_down, or an error event on a stream)`,
    );
  }
  return 0;
}
