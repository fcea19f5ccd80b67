/**
 * The program the load tester starts as a child process, from the same build as itself: `sim ...`
 * runs simulated nodes, anything else goes to the `sluice` command line (`serve --config FILE`). It
 * is a process entry point, so unlike library code it exits with the command's code; it stops
 * itself (SIGTERM, a clean drain) when the process that started it is gone.
 */

import { runSimCli } from '../sim/cli.js';

/** How often the child checks that the load generator that started it is still there, ms. */
const PARENT_CHECK_MS = 1000;

// The child runs in its own process group (so that Ctrl-C reaches only the generator); if the
// generator dies without stopping it, the child is re-parented and stops itself.
const parent = process.ppid;
setInterval(() => {
  if (process.ppid !== parent) process.kill(process.pid, 'SIGTERM');
}, PARENT_CHECK_MS).unref();

const [command, ...rest] = process.argv.slice(2);
let code: number;
if (command === 'sim') {
  code = await runSimCli(rest);
} else {
  const { main } = await import('../../proxy/cli/main.js');
  code = await main(process.argv.slice(2));
}
process.exit(code);
