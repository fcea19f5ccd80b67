/**
 * `sluice check FILE [FILE...]`: validates config files without starting anything and reports like
 * a compiler. Resolves to the exit code; never calls process.exit (the bin script does).
 */
import { formatConfigError, loadConfigFile } from './loader.js';

/** Where the command writes; the process streams by default, a buffer in tests. */
export interface CheckCliOutput {
  stdout(text: string): void;
  stderr(text: string): void;
}

const processOutput: CheckCliOutput = {
  stdout: (text) => void process.stdout.write(text),
  stderr: (text) => void process.stderr.write(text),
};

const USAGE = `usage: sluice check FILE [FILE...]

Validates Sluice config files. Prints "FILE: OK (...)" for each valid file, and one
"file:line:col path: message" line per problem otherwise.
Exit status: 0 all files valid, 1 some file invalid, 2 usage error.
`;

function count(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}

/**
 * Runs the check command on `argv`, the arguments after `check`. Files are checked in order;
 * `--` ends options (for file names starting with '-'), `-h`/`--help` prints usage.
 * Resolves to 0 when every file is valid, 1 when any is not, 2 on a usage error.
 *
 * @example
 * process.exitCode = await runCheckCli(['config/default.yaml']);
 */
export async function runCheckCli(argv: string[], output: CheckCliOutput = processOutput): Promise<number> {
  const files: string[] = [];
  let optionsDone = false;
  for (const arg of argv) {
    if (optionsDone || !arg.startsWith('-')) {
      files.push(arg);
    } else if (arg === '--') {
      optionsDone = true;
    } else if (arg === '-h' || arg === '--help') {
      output.stdout(USAGE);
      return 0;
    } else {
      output.stderr(`sluice check: unknown option ${JSON.stringify(arg)}\n\n${USAGE}`);
      return 2;
    }
  }
  if (files.length === 0) {
    output.stderr(`sluice check: no config file given\n\n${USAGE}`);
    return 2;
  }
  let status = 0;
  for (const file of files) {
    const result = await loadConfigFile(file);
    if (result.ok) {
      const { listeners, pools, routes } = result.config;
      output.stdout(
        `${file}: OK (${count(listeners.length, 'listener')}, ${count(pools.length, 'pool')}, ${count(routes.length, 'route')})\n`,
      );
    } else {
      status = 1;
      output.stderr(result.errors.map((e) => `${formatConfigError(e)}\n`).join(''));
      output.stderr(`${file}: ${count(result.errors.length, 'error')}\n`);
    }
  }
  return status;
}
