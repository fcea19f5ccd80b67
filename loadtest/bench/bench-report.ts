/**
 * The proxy benchmark's report: markdown tables from the result records of one run of the
 * benchmark. CPU per request (or per SSE chunk) and its ratios are medians over the rounds, each
 * ratio taken within one round (the same machine state), which is what makes them comparable
 * across days; requests/s are shown as the median and the range. Pure.
 */
import type { BenchRecord, FailedRecord } from './cpu-accounting.js';

/** A line of the results file. */
export type ResultLine = BenchRecord | FailedRecord;

/** True for a line that carries figures. */
export function isMeasured(line: ResultLine): line is BenchRecord {
  return !('failed' in line);
}

/** Median of a non-empty list; NaN for an empty one. */
export function median(values: readonly number[]): number {
  if (values.length === 0) return NaN;
  const s = [...values].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 === 1 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

const dash = '–';
const fixed = (v: number, digits: number): string => (Number.isFinite(v) ? v.toFixed(digits) : dash);

/** Requests per second: `9.7k` from 1000 up, whole numbers below. */
export function formatRate(v: number): string {
  if (!Number.isFinite(v)) return dash;
  return v >= 1000 ? `${(v / 1000).toFixed(1)}k` : Math.round(v).toString();
}

/** Median and, with several rounds, the range: `12.3k (11.9k–12.8k)`. */
function rateCell(values: readonly number[]): string {
  if (values.length === 0) return dash;
  const med = formatRate(median(values));
  if (values.length === 1) return med;
  return `${med} (${formatRate(Math.min(...values))}–${formatRate(Math.max(...values))})`;
}

/** Median over rounds of `value(target's record) / value(baseline's record)` in the same round. */
function ratioCell(
  rows: readonly BenchRecord[],
  all: readonly BenchRecord[],
  baseline: string,
  value: (r: BenchRecord) => number | null,
): string {
  const ratios: number[] = [];
  for (const r of rows) {
    const base = all.find((b) => b.target === baseline && b.run === r.run);
    const a = value(r);
    const b = base === undefined ? null : value(base);
    if (a !== null && b !== null && b > 0) ratios.push(a / b);
  }
  return ratios.length === 0 ? dash : fixed(median(ratios), 2);
}

function medianOf(rows: readonly BenchRecord[], value: (r: BenchRecord) => number | null): number {
  return median(rows.map(value).filter((v): v is number => v !== null));
}

/** Records grouped by target, in order of first appearance. */
function byTarget(records: readonly BenchRecord[]): Map<string, BenchRecord[]> {
  const out = new Map<string, BenchRecord[]>();
  for (const r of records) {
    const list = out.get(r.target);
    if (list === undefined) out.set(r.target, [r]);
    else list.push(r);
  }
  return out;
}

function table(header: readonly string[], align: readonly ('l' | 'r')[], rows: readonly string[][]): string {
  const lines = [
    `| ${header.join(' | ')} |`,
    `| ${align.map((a) => (a === 'l' ? '---' : '--:')).join(' | ')} |`,
    ...rows.map((r) => `| ${r.join(' | ')} |`),
  ];
  return lines.join('\n');
}

function fastTable(records: readonly BenchRecord[]): string | null {
  const fast = records.filter((r) => r.case === 'fast');
  if (fast.length === 0) return null;
  const rows: string[][] = [];
  for (const [target, list] of byTarget(fast)) {
    const cpu = (r: BenchRecord): number | null => r.proxyUsPerReq;
    rows.push([
      `${list[0]!.label} (\`${target}\`)`,
      fixed(medianOf(list, cpu), 1),
      ratioCell(list, fast, 'bare', cpu),
      ratioCell(list, fast, 'nginx', cpu),
      rateCell(list.map((r) => r.rps)),
      String(list.reduce((s, r) => s + r.errors, 0)),
    ]);
  }
  const r0 = fast[0]!;
  return [
    `#### Proxy CPU per request: node answers at once, ${r0.conns} connections, ${r0.durS} s per round`,
    '',
    table(
      ['target', 'proxy CPU µs/request', '× bare forwarder', '× nginx', 'req/s', 'errors'],
      ['l', 'r', 'r', 'r', 'r', 'r'],
      rows,
    ),
  ].join('\n');
}

function slowTable(records: readonly BenchRecord[]): string | null {
  const slow = records.filter((r) => r.case === 'slow');
  if (slow.length === 0) return null;
  const rows: string[][] = [];
  for (const [target, list] of byTarget(slow)) {
    rows.push([
      `${list[0]!.label} (\`${target}\`)`,
      rateCell(list.map((r) => r.rps)),
      ratioCell(list, slow, 'direct-slow', (r) => r.rps),
      fixed(
        medianOf(list, (r) => r.p50Ms),
        1,
      ),
      fixed(
        medianOf(list, (r) => r.p99Ms),
        1,
      ),
      String(list.reduce((s, r) => s + r.errors, 0)),
    ]);
  }
  const r0 = slow[0]!;
  return [
    `#### Slow node: answers after a delay, ${r0.conns} connections, ${r0.durS} s per round`,
    '',
    table(
      ['target', 'req/s', '× direct req/s', 'p50 ms', 'p99 ms', 'errors'],
      ['l', 'r', 'r', 'r', 'r', 'r'],
      rows,
    ),
  ].join('\n');
}

function streamTable(records: readonly BenchRecord[]): string | null {
  const streamed = records.filter((r) => r.case === 'stream' || r.case === 'paced');
  if (streamed.length === 0) return null;
  const rows: string[][] = [];
  for (const c of ['stream', 'paced'] as const) {
    const inCase = streamed.filter((r) => r.case === c);
    const suffix = `-${c}`;
    for (const [target, list] of byTarget(inCase)) {
      const cpu = (r: BenchRecord): number | null => r.proxyUsPerChunk;
      rows.push([
        `${list[0]!.label} (\`${target}\`)`,
        c === 'stream' ? 'at once' : 'paced',
        String(list[0]!.conns),
        fixed(medianOf(list, cpu), 2),
        ratioCell(list, inCase, `bare${suffix}`, cpu),
        ratioCell(list, inCase, `nginx${suffix}`, cpu),
        rateCell(list.map((r) => r.rps)),
        rateCell(list.map((r) => r.rps * r.chunksPerReq)),
        fixed(
          medianOf(list, (r) => r.p50Ms),
          1,
        ),
        fixed(
          medianOf(list, (r) => r.p99Ms),
          1,
        ),
        String(list.reduce((s, r) => s + r.errors, 0)),
      ]);
    }
  }
  const chunks = streamed[0]!.chunksPerReq;
  return [
    `#### Streaming: CPU per forwarded SSE chunk (${chunks} writes per stream)`,
    '',
    table(
      [
        'target',
        'node writes',
        'connections',
        'proxy CPU µs/chunk',
        '× bare forwarder',
        '× nginx',
        'streams/s',
        'chunks/s',
        'p50 ms',
        'p99 ms',
        'errors',
      ],
      ['l', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
      rows,
    ),
  ].join('\n');
}

function roundsTable(records: readonly BenchRecord[]): string {
  const rows = records.map((r) => [
    r.target,
    String(r.run),
    formatRate(r.rps),
    fixed(r.p50Ms, 2),
    fixed(r.p99Ms, 2),
    String(r.errors),
    r.corePct.map((p) => fixed(p, 0)).join(' / '),
    fixed(r.stealPct, 1),
    r.proxyUsPerReq === null ? dash : fixed(r.proxyUsPerReq, 1),
    r.upstreamUsPerReq === null ? dash : fixed(r.upstreamUsPerReq, 1),
  ]);
  return [
    '#### Every round',
    '',
    table(
      [
        'target',
        'round',
        'req/s',
        'p50 ms',
        'p99 ms',
        'errors',
        'core busy %',
        'steal %',
        'proxy µs/req',
        'node µs/req',
      ],
      ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
      rows,
    ),
  ].join('\n');
}

/** The whole report: the fast, slow and streaming tables, every round, then failures. */
export function renderReport(lines: readonly ResultLine[]): string {
  const records = lines.filter(isMeasured);
  const failed = lines.filter((l): l is FailedRecord => !isMeasured(l));
  const parts = [fastTable(records), slowTable(records), streamTable(records)].filter(
    (p): p is string => p !== null,
  );
  if (records.length > 0) parts.push(roundsTable(records));
  if (failed.length > 0) {
    parts.push(
      ['#### Failed runs', '', ...failed.map((f) => `- round ${f.run}, \`${f.target}\`: ${f.failed}`)].join(
        '\n',
      ),
    );
  }
  if (parts.length === 0) return 'No results.\n';
  return `${parts.join('\n\n')}\n`;
}

/** One progress line for a record, printed as the run goes. */
export function progressLine(line: ResultLine): string {
  if (!isMeasured(line)) return `  ${line.target.padEnd(16)} FAILED: ${line.failed}`;
  const cpu =
    line.proxyUsPerChunk !== null
      ? `proxy ${fixed(line.proxyUsPerChunk, 2)} µs/chunk`
      : line.proxyUsPerReq !== null
        ? `proxy ${fixed(line.proxyUsPerReq, 1)} µs/req`
        : 'no proxy';
  return (
    `  ${line.target.padEnd(16)} ${formatRate(line.rps).padStart(7)} req/s  p50 ${fixed(line.p50Ms, 2)}` +
    `  p99 ${fixed(line.p99Ms, 2)} ms  errors ${line.errors}  cores ${line.corePct.map((p) => fixed(p, 0)).join('/')}%` +
    `  ${cpu}`
  );
}

/** Parses a results file (JSON lines). Throws on a line that is not JSON. */
export function parseResults(text: string): ResultLine[] {
  return text
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as ResultLine);
}
