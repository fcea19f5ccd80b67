/**
 * Test helper: suites that need an external tool (`promtool`, `chromium`) pass
 * `{ skip: toolSkip(...) }`. Without the tool they are skipped with one loud line, unless the
 * named environment variable is `1` (set by `.ci/run`), where the missing tool fails them instead.
 */
import { spawnSync } from 'node:child_process';

const reasons = new Map<string, string | false>();

/** True when `command --version` runs. */
export function hasTool(command: string): boolean {
  return spawnSync(command, ['--version'], { stdio: 'ignore' }).error === undefined;
}

/**
 * The `skip` option for a suite that needs `command`: false when it is on PATH or `requireEnv=1`,
 * else the reason (printed once to stderr so that a skip is never silent).
 */
export function toolSkip(command: string, requireEnv: string, installHint: string): string | false {
  const known = reasons.get(command);
  if (known !== undefined) return known;
  let reason: string | false = false;
  if (!hasTool(command) && process.env[requireEnv] !== '1') {
    reason = `${command} is not on PATH: these suites are skipped; ${installHint}, or set ${requireEnv}=1 to make this a failure`;
    process.stderr.write(`\n*** SKIPPING ${command.toUpperCase()} TESTS: ${reason} ***\n\n`);
  }
  reasons.set(command, reason);
  return reason;
}
