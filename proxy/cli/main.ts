/**
 * The `sluice` command line: `serve`, `check`, `sim`, `loadtest`, `capacity`, `stats` and `version`. Each
 * subcommand resolves to an exit code; only the bin script calls process.exit.
 */
import { defaultConfigPath } from '../../config/sluice-root.js';
import { runServe } from './serve.js';
import { sluiceVersion } from './version.js';

const USAGE = `usage: sluice <command> [options]

commands:
  serve [--config FILE]   run the proxy (default config: config/default.yaml, the embedded demo
                          with four simulated GPU nodes)
  check FILE [FILE...]    validate config files; exit 1 with file:line:col errors
  sim --nodes N --port P  run simulated GPU inference nodes on consecutive ports
  loadtest SCENARIO.yaml  run a load-test scenario (see docs/loadtesting.md)
  loadtest compare A B    compare two result files side by side
  loadtest jobs-crash     kill -9 Sluice during a durable batch and check every result after
  capacity ...            how many GPU nodes for a load: from numbers, or per pool from a
                          running Sluice (--admin URL); see docs/capacity.md
  stats --admin URL ...   merge the latency histograms of running instances and print
                          percentiles (see docs/observability.md)
  version                 print the version
`;

/** Runs one command line; resolves to the exit code. */
export async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  switch (cmd) {
    case 'serve':
      return runServe(rest, defaultConfigPath());
    case 'check': {
      const { runCheckCli } = await import('../../config/check-cli.js');
      return runCheckCli(rest);
    }
    case 'sim': {
      const { runSimCli } = await import('../../loadtest/sim/cli.js');
      return runSimCli(rest);
    }
    case 'loadtest': {
      const { runLoadtestCli } = await import('../../loadtest/cli.js');
      return runLoadtestCli(rest);
    }
    case 'capacity': {
      const { runCapacityCli } = await import('../capacity/capacity-cli.js');
      return runCapacityCli(rest);
    }
    case 'stats': {
      const { runStatsCli } = await import('./stats-cli.js');
      return runStatsCli(rest);
    }
    case 'version':
    case '--version': {
      process.stdout.write(`sluice ${sluiceVersion()}\n`);
      return 0;
    }
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(USAGE);
      return cmd === undefined ? 2 : 0;
    default:
      process.stderr.write(`sluice: unknown command "${cmd}"\n\n${USAGE}`);
      return 2;
  }
}
