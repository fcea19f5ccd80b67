/** Recording one latency into a route's HDR histogram (1 µs to 1 h, 3 significant digits). */
import { LatencyRecorder } from '../../proxy/metrics/latency-recorder.js';
import type { MicroBenchmark } from './micro-benchmark.js';

export const benchmarks: MicroBenchmark[] = [
  {
    name: 'metrics: HDR latency record',
    allocationFree: true,
    setup() {
      const recorder = new LatencyRecorder();
      // Latencies from 0.2 ms to about 2 s, spread over the histogram's buckets.
      const values = Float64Array.from({ length: 4096 }, (_, i) => 0.2 * Math.pow(1.0023, i));
      let i = 0;
      return () => {
        recorder.recordMs(values[i++ & 4095]!);
        return recorder;
      };
    },
  },
];
