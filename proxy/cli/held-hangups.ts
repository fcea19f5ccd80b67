/**
 * SIGHUP held while `sluice serve` starts. A signal without a handler gets Node's default action,
 * which for SIGHUP kills the process at once; `serve` reloads on SIGHUP, but only once it serves.
 * This module holds the signals that arrive before then, and imports nothing, so that the bin
 * script can hold them before it loads the rest of Sluice.
 */

let held = false;
let holding = false;

function hold(): void {
  held = true;
}

/**
 * Starts holding SIGHUP: from now on one no longer kills the process but is remembered until
 * `takeHeldHangups`. Called by the bin script for `serve` before anything else loads, and again
 * by `runServe` (a no-op then).
 */
export function holdHangups(): void {
  if (holding) return;
  holding = true;
  process.on('SIGHUP', hold);
}

/**
 * Stops holding SIGHUP and tells whether at least one arrived meanwhile. Called once the caller's
 * own SIGHUP handler is installed: removing the last handler restores the default action, so the
 * new one must be in place first.
 */
export function takeHeldHangups(): boolean {
  if (holding) process.off('SIGHUP', hold);
  holding = false;
  const was = held;
  held = false;
  return was;
}
