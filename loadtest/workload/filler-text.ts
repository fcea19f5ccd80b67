/**
 * Seeded filler text of an exact token length (the simulator counts ⌈characters / 4⌉ tokens), for
 * prompts, user turns and embedding inputs. Same generator state, same text.
 */

import { CHARS_PER_TOKEN } from '../sim/outputs.js';
import type { SeededRandom } from '../sim/prng.js';

const WORDS = [
  'alpha',
  'bravo',
  'cargo',
  'delta',
  'ember',
  'fjord',
  'gamma',
  'harbor',
  'ion',
  'jasper',
  'kernel',
  'lumen',
  'matrix',
  'nectar',
  'orbit',
  'prism',
  'quartz',
  'relay',
  'sierra',
  'tensor',
  'umbra',
  'vector',
  'willow',
  'xenon',
  'yonder',
  'zephyr',
  'atlas',
  'beacon',
  'cipher',
  'dune',
  'echo',
  'flux',
  'glyph',
  'halo',
  'index',
  'jolt',
  'karma',
  'lattice',
  'mosaic',
  'nova',
  'opal',
  'pulse',
  'quill',
  'ridge',
  'signal',
  'tide',
  'unit',
  'vortex',
  'wave',
  'yield',
  'zenith',
  'amber',
  'basalt',
  'cobalt',
  'drift',
  'epoch',
  'fable',
  'granite',
  'haven',
  'ivory',
  'juniper',
  'kite',
  'lagoon',
  'meadow',
];

/** Text of exactly `tokens × 4` characters: random words separated by spaces, cut to length. */
export function fillerText(tokens: number, rng: SeededRandom): string {
  const want = tokens * CHARS_PER_TOKEN;
  const parts: string[] = [];
  let length = 0;
  while (length < want) {
    const word = WORDS[rng.nextInt(WORDS.length)] as string;
    parts.push(word);
    length += word.length + 1;
  }
  return parts.join(' ').slice(0, want);
}
