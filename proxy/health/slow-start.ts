/**
 * Slow start: the weight multiplier of a node that has just come back, ramping linearly from a
 * minimum to 1 so that a cold node (empty KV and prefix caches) is not handed its full share at
 * once. Pure arithmetic; `PoolHealth` owns the timer that writes the result to `node.weightFactor`.
 */

/**
 * The weight factor `elapsedMs` after the ramp started: `minWeightFactor` at 0, rising linearly to
 * 1 at `slowStartMs`, 1 from then on (and always 1 when `slowStartMs` is 0, i.e. slow start off).
 *
 * ```
 *  1 ┤            ┌──────
 *    │         ╱
 *    │      ╱
 *  m ┤───╱
 *    └───┬────────┬──────▶ elapsed ms
 *        0   slowStartMs
 * ```
 */
export function slowStartFactor(elapsedMs: number, slowStartMs: number, minWeightFactor: number): number {
  if (slowStartMs <= 0 || elapsedMs >= slowStartMs) return 1;
  if (elapsedMs <= 0) return minWeightFactor;
  return minWeightFactor + ((1 - minWeightFactor) * elapsedMs) / slowStartMs;
}

/**
 * How often a ramping pool refreshes its nodes' weight factors, ms: about 50 steps per ramp, at
 * least every 10 ms and at most every second (a 30 s ramp moves in steps of 600 ms, +1.8 %).
 */
export function slowStartTickMs(slowStartMs: number): number {
  return Math.min(1000, Math.max(10, slowStartMs / 50));
}
