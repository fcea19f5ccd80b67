/**
 * Reads the three load gauges Sluice uses out of a vLLM `/metrics` page (Prometheus text exposition
 * format 0.0.4). A pure parser: it fetches nothing and ignores every other metric.
 */

/** The gauges read from one page; -1 when the page does not have the metric. */
export interface VllmLoad {
  /** `vllm:num_requests_running`, summed over series (one per model). */
  running: number;
  /** `vllm:num_requests_waiting`, summed over series. */
  waiting: number;
  /**
   * `vllm:gpu_cache_usage_perc` (or its newer name `vllm:kv_cache_usage_perc`), 0..1 despite the
   * name; the highest value over series.
   */
  kvUsage: number;
}

const RUNNING = 'vllm:num_requests_running';
const WAITING = 'vllm:num_requests_waiting';
const KV_USAGE = 'vllm:gpu_cache_usage_perc';
const KV_USAGE_NEW = 'vllm:kv_cache_usage_perc';

/** Index just past the `{...}` label set starting at `i` (which is `{`), honouring quoted values; -1 if unclosed. */
function skipLabels(line: string, i: number): number {
  let inQuotes = false;
  for (let j = i + 1; j < line.length; j++) {
    const c = line.charCodeAt(j);
    if (inQuotes) {
      if (c === 0x5c /* \ */) j++;
      else if (c === 0x22 /* " */) inQuotes = false;
    } else if (c === 0x22) {
      inQuotes = true;
    } else if (c === 0x7d /* } */) {
      return j + 1;
    }
  }
  return -1;
}

/** The sample value of a line whose name ends at `i`; NaN when it cannot be read. */
function sampleValue(line: string, i: number): number {
  let j = i;
  if (line.charCodeAt(j) === 0x7b /* { */) {
    j = skipLabels(line, j);
    if (j < 0) return NaN;
  }
  // The value is the first whitespace-separated field after the name and labels; an optional
  // timestamp may follow it.
  const rest = line.slice(j).trim();
  const end = rest.search(/\s/);
  const text = end < 0 ? rest : rest.slice(0, end);
  if (text === '') return NaN;
  if (text === '+Inf') return Infinity;
  if (text === '-Inf') return -Infinity;
  return Number(text);
}

/**
 * Parses a Prometheus text page and returns vLLM's running/waiting/KV-usage gauges. Comment lines,
 * other metrics and samples with an unreadable or non-finite value are skipped; a metric with no
 * usable sample reads -1.
 *
 * @example
 * parseVllmLoad('vllm:num_requests_waiting{model_name="m"} 3\n').waiting; // 3
 */
export function parseVllmLoad(text: string): VllmLoad {
  const out: VllmLoad = { running: -1, waiting: -1, kvUsage: -1 };
  let start = 0;
  while (start < text.length) {
    let end = text.indexOf('\n', start);
    if (end < 0) end = text.length;
    const line = text.slice(start, end);
    start = end + 1;
    if (!line.startsWith('vllm:')) continue;
    let nameEnd = 0;
    while (nameEnd < line.length) {
      const c = line.charCodeAt(nameEnd);
      if (c === 0x7b /* { */ || c === 0x20 || c === 0x09) break;
      nameEnd++;
    }
    const name = line.slice(0, nameEnd);
    if (name !== RUNNING && name !== WAITING && name !== KV_USAGE && name !== KV_USAGE_NEW) continue;
    const v = sampleValue(line, nameEnd);
    if (!Number.isFinite(v)) continue;
    if (name === RUNNING) out.running = Math.max(out.running, 0) + v;
    else if (name === WAITING) out.waiting = Math.max(out.waiting, 0) + v;
    else out.kvUsage = Math.max(out.kvUsage, v);
  }
  return out;
}
