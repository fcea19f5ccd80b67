/**
 * V8 settings for a proxy's allocations, applied by `sluice serve` before it starts.
 *
 * `--no-allocation-site-pretenuring`: V8 watches how many objects of each allocation site survive a
 * young-generation collection and, above a threshold, allocates that site's objects directly in the
 * old generation. Under load a request's objects (its head, headers, upstream request) were judged
 * long-lived that way, though every one of them dies with its request; once old, a dead object keeps
 * what it points to alive through every young collection until the next full one, so each request's
 * strings and arrays were promoted too. Measured under the 20 ms / 200-connection case: about
 * 0.73 MB promoted per young collection and 3–6 full collections in 8 s with it, 9–33 kB and 2
 * without (docs/benchmarks.md). Sluice's long-lived state is built at start and on reload, where
 * pretenuring saves little.
 */
import { setFlagsFromString } from 'node:v8';

/** The flags `tuneV8` sets. */
const V8_FLAGS: readonly string[] = ['--no-allocation-site-pretenuring'];

/** Applies V8_FLAGS to this process (V8 reads them at each collection). */
export function tuneV8(): void {
  for (const f of V8_FLAGS) setFlagsFromString(f);
}
