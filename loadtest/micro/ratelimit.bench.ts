/**
 * Rate limiting in process: the store's take on a tenant's two buckets (requests and tokens per
 * minute), and the limiter's whole per-request cycle (check with a concurrency slot, reconcile with
 * the real usage, release), and the response headers of an admitted request. Limits are high
 * enough never to reject.
 */
import { InProcessStore } from '../../proxy/ratelimit/in-process-store.js';
import type { RateLimitDecision } from '../../proxy/ratelimit/rate-limit-decision.js';
import { rateLimitHeaders } from '../../proxy/ratelimit/rate-limit-headers.js';
import { RateLimiter } from '../../proxy/ratelimit/rate-limiter.js';
import type { MicroBenchmark } from './micro-benchmark.js';

/** Estimated tokens of the benchmark's chat request (prompt + max_tokens). */
const TOKENS = 1200;

function limiter(): RateLimiter {
  return new RateLimiter({
    store: new InProcessStore(),
    tenants: {
      bench: { requestsPerMinute: 1e12, tokensPerMinute: 1e15, maxConcurrent: 1_000_000 },
    },
  });
}

export const benchmarks: MicroBenchmark[] = [
  {
    name: 'ratelimit: in-process store take, requests + tokens buckets',
    setup() {
      const l = limiter();
      const set = l.forTenant('bench').forModel(null);
      const levels = new Array<number>(set.buckets.length).fill(0);
      const store = l.store;
      return () => store.take(set.buckets, TOKENS, levels);
    },
  },
  {
    name: 'ratelimit: limiter check + reconcile + release, 3 limits (a decision object per request)',
    setup() {
      const l = limiter();
      const tenant = l.forTenant('bench');
      return () => {
        const d = l.check(tenant, null, TOKENS) as RateLimitDecision;
        l.reconcile(d, 900);
        l.release(d);
        return d;
      };
    },
  },
  {
    name: 'ratelimit: response headers of an admitted request (requests and tokens, 6 headers)',
    setup() {
      // Resets of more than a second with a fraction (1.277s, 1.44s): the longest formatting path.
      const l = new RateLimiter({
        store: new InProcessStore(),
        tenants: {
          bench: { requestsPerMinute: 7_000, tokensPerMinute: 9_000_000, maxConcurrent: 1_000_000 },
        },
      });
      const d = l.check(l.forTenant('bench'), null, TOKENS) as RateLimitDecision;
      const out: string[] = [];
      return () => {
        out.length = 0;
        return rateLimitHeaders(d, out);
      };
    },
  },
];
