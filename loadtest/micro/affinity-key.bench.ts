/**
 * Affinity key extraction: the prompt-prefix key (the first 600 characters of a 1 KB chat body's
 * prompt, hashed) from an already parsed body, and the header key as the cheap reference.
 */
import { createAffinityExtractor, type AffinitySource } from '../../proxy/balance/affinity-key.js';
import { CHAT_BODY } from './bench-fixtures.js';
import type { MicroBenchmark } from './micro-benchmark.js';

/** A request as the extractor sees it: a parsed body and one header. */
class Source implements AffinitySource {
  readonly tenant = 'bench';
  private readonly body: unknown = JSON.parse(CHAT_BODY);

  header(name: string): string | undefined {
    return name === 'x-session-id' ? 'session-0123456789' : undefined;
  }

  json(): unknown {
    return this.body;
  }
}

export const benchmarks: MicroBenchmark[] = [
  {
    name: 'affinity: prompt-prefix key, 600 characters of a parsed 1 KB chat body',
    setup() {
      const extract = createAffinityExtractor({ source: 'prefix', chars: 600 });
      const src = new Source();
      if (extract(src) === null) throw new Error('no prefix key');
      return () => extract(src);
    },
  },
  {
    name: 'affinity: header key (x-session-id)',
    allocationFree: true,
    setup() {
      const extract = createAffinityExtractor({ source: 'header', name: 'x-session-id' });
      const src = new Source();
      return () => extract(src);
    },
  },
];
