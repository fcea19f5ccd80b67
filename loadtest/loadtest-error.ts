/**
 * The one error type of `sluice loadtest`: a stable code, a message a newcomer can act on, and the
 * `file:line:col` lines of a rejected scenario. Anything the CLI prints instead of a stack trace is one
 * of these; anything else escaping a run is a bug.
 */

/** Stable error codes (`SLUICE_LOADTEST_<WHAT>`). */
export const LoadtestErrorCode = {
  /** The scenario file is unreadable or invalid; `details` holds one `file:line:col` line per problem. */
  scenarioInvalid: 'SLUICE_LOADTEST_SCENARIO_INVALID',
  /** The target refused TCP connections (nothing listens there). */
  targetRefused: 'SLUICE_LOADTEST_TARGET_REFUSED',
  /** The target could not be reached for another reason (timeout, reset, bad address). */
  targetUnreachable: 'SLUICE_LOADTEST_TARGET_UNREACHABLE',
  /** The simulated fleet could not start (port, profile). */
  fleetStartFailed: 'SLUICE_LOADTEST_FLEET_START_FAILED',
  /** The Sluice child process exited or did not report its listener in time. */
  sluiceStartFailed: 'SLUICE_LOADTEST_SLUICE_START_FAILED',
  /** A result file given to `compare` is unreadable or not a loadtest result. */
  resultInvalid: 'SLUICE_LOADTEST_RESULT_INVALID',
  /** Result files could not be written to the output directory. */
  outputFailed: 'SLUICE_LOADTEST_OUTPUT_FAILED',
  /** A command-line argument is wrong. */
  usage: 'SLUICE_LOADTEST_USAGE',
  /** Interrupted (Ctrl-C, SIGTERM) before the measured phase started: nothing was measured or written. */
  interrupted: 'SLUICE_LOADTEST_INTERRUPTED',
} as const;
export type LoadtestErrorCode = (typeof LoadtestErrorCode)[keyof typeof LoadtestErrorCode];

/** A failure the CLI reports as a message (never a stack trace). */
export class LoadtestError extends Error {
  override readonly name = 'LoadtestError';

  /**
   * @param code - stable code from {@link LoadtestErrorCode}
   * @param message - one sentence saying what went wrong and what to do
   * @param details - further lines, e.g. `file:line:col path: message` per scenario problem
   */
  constructor(
    readonly code: LoadtestErrorCode,
    message: string,
    readonly details: readonly string[] = [],
  ) {
    super(message);
  }
}
