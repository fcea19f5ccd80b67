/**
 * How many cases each property test runs: a few hundred in `npm test`, `SLUICE_FUZZ_RUNS` (10,000
 * in `npm run fuzz`) when set. A failure prints fast-check's seed and path, so
 * `SLUICE_FUZZ_SEED=... SLUICE_FUZZ_PATH=...` replays exactly the failing case.
 */
import type { Parameters } from 'fast-check';

/** Runs per property. */
export const FUZZ_RUNS = Number(process.env['SLUICE_FUZZ_RUNS'] ?? 300);

/** fast-check parameters: `FUZZ_RUNS` runs, and the seed and path to replay when given. */
export function fuzzParams<T>(runs = FUZZ_RUNS): Parameters<T> {
  const seed = process.env['SLUICE_FUZZ_SEED'];
  const path = process.env['SLUICE_FUZZ_PATH'];
  return {
    numRuns: runs,
    includeErrorInReport: true,
    ...(seed === undefined ? {} : { seed: Number(seed) }),
    ...(path === undefined ? {} : { path }),
  };
}

/**
 * Runs of a property that opens a connection to a running Sluice per case: as many as `FUZZ_RUNS`
 * up to 2,000 (each case costs milliseconds of real I/O), or `SLUICE_FUZZ_SOCKET_RUNS`.
 */
export const SOCKET_RUNS = Number(process.env['SLUICE_FUZZ_SOCKET_RUNS'] ?? Math.min(FUZZ_RUNS, 2000));

/** Test timeout for a property file: generous, scaled with the runs. */
export const FUZZ_TIMEOUT_MS = Math.max(120_000, FUZZ_RUNS * 60);
