/**
 * `sluice stats --admin URL [URL...]`: reads `GET /admin/histograms` from one or more running
 * Sluice instances, merges the HDR histograms exactly (per route, node, tenant or series, across
 * instances) and prints percentiles as a table, or as JSON, or writes HdrHistogram's `.hgrm`
 * percentile distribution of everything merged. Resolves to the exit code.
 */
import { writeFile } from 'node:fs/promises';
import { decodeFromCompressedBase64, type Histogram } from 'hdr-histogram-js';
import { adminHeaders, fetchFailure, statusHint } from '../admin/admin-client.js';
import type { HistogramsBody } from '../admin/histograms-view.js';
import { METRICS } from '../metrics/series-metrics.js';
import { httpFetch } from '../runtime/optional-modules.js';
import { textTable } from '../../loadtest/report/text-table.js';

/** Where the command writes; the process streams by default, a buffer in tests. */
export interface StatsCliOutput {
  stdout(text: string): void;
  stderr(text: string): void;
}

const processOutput: StatsCliOutput = {
  stdout: (text) => void process.stdout.write(text),
  stderr: (text) => void process.stderr.write(text),
};

export const STATS_USAGE = `usage: sluice stats --admin URL [--admin URL ...] [URL ...]
                    [--metric ${METRICS.map((m) => m.key).join('|')}] [--view window|total]
                    [--by route|node|tenant|series|all] [--hgrm FILE] [--json]

Merges the HDR histograms of one quantity from every instance named and prints p50, p90, p99,
p99.9 and max per group (latencies in ms). Default: --metric duration --view window --by route.
--hgrm FILE writes the percentile distribution of everything merged (HdrHistogram .hgrm format).
The admin token, when the instances need one, is read from SLUICE_ADMIN_TOKEN.
`;

interface StatsArgs {
  admins: string[];
  metric: string;
  view: 'window' | 'total';
  by: 'route' | 'node' | 'tenant' | 'series' | 'all';
  hgrm: string | null;
  json: boolean;
  help: boolean;
}

class StatsArgError extends Error {}

function parseArgs(argv: readonly string[]): StatsArgs {
  const a: StatsArgs = {
    admins: [],
    metric: 'duration',
    view: 'window',
    by: 'route',
    hgrm: null,
    json: false,
    help: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    const value = (): string => {
      const v = argv[++i];
      if (v === undefined) throw new StatsArgError(`${arg} needs a value`);
      return v;
    };
    if (arg === '--admin') a.admins.push(value());
    else if (arg === '--metric') a.metric = value();
    else if (arg === '--view') {
      const v = value();
      if (v !== 'window' && v !== 'total') throw new StatsArgError('--view must be window or total');
      a.view = v;
    } else if (arg === '--by') {
      const v = value();
      if (v !== 'route' && v !== 'node' && v !== 'tenant' && v !== 'series' && v !== 'all')
        throw new StatsArgError('--by must be route, node, tenant, series or all');
      a.by = v;
    } else if (arg === '--hgrm') a.hgrm = value();
    else if (arg === '--json') a.json = true;
    else if (arg === '--help' || arg === '-h') a.help = true;
    else if (arg.startsWith('http://') || arg.startsWith('https://')) a.admins.push(arg);
    else throw new StatsArgError(`unknown argument ${arg}`);
  }
  if (!a.help && a.admins.length === 0) throw new StatsArgError('give at least one --admin URL');
  if (!METRICS.some((m) => m.key === a.metric))
    throw new StatsArgError(`--metric must be one of ${METRICS.map((m) => m.key).join(', ')}`);
  return a;
}

/** The group a series falls in for `--by`; null to leave it out. */
function groupOf(h: HistogramsBody['histograms'][number], by: StatsArgs['by']): string | null {
  const tenant = h.tenant !== '';
  switch (by) {
    case 'route':
      return tenant ? null : h.route;
    case 'node':
      return tenant ? null : `${h.pool} ${h.node}`;
    case 'series':
      return tenant ? null : `${h.route} ${h.pool} ${h.node}`;
    case 'tenant':
      return tenant ? h.tenant : null;
    case 'all':
      return tenant ? null : 'all';
  }
}

async function fetchBody(admin: string, a: StatsArgs): Promise<HistogramsBody> {
  const kind = a.by === 'tenant' ? 'tenant' : 'route';
  const url = new URL(`/admin/histograms?metric=${a.metric}&view=${a.view}&kind=${kind}`, admin);
  const res = await httpFetch(url, { headers: adminHeaders(), signal: AbortSignal.timeout(10_000) });
  const text = await res.text();
  if (res.status !== 200) {
    throw new Error(
      `${url.href} answered ${res.status}: ${text.trim().slice(0, 300)}${statusHint(res.status)}`,
    );
  }
  return JSON.parse(text) as HistogramsBody;
}

/**
 * Runs `sluice stats` with `argv` (the arguments after `stats`). Resolves 0 with a table, 1 when an
 * instance cannot be read, 2 on a bad argument.
 *
 * @example
 * await runStatsCli(['--admin', 'http://10.0.0.5:9901', '--admin', 'http://10.0.0.6:9901', '--metric', 'ttft']);
 */
export async function runStatsCli(argv: string[], out: StatsCliOutput = processOutput): Promise<number> {
  let a: StatsArgs;
  try {
    a = parseArgs(argv);
  } catch (e) {
    if (!(e instanceof StatsArgError)) throw e;
    out.stderr(`sluice stats: ${e.message}\n\n${STATS_USAGE}`);
    return 2;
  }
  if (a.help) {
    out.stdout(STATS_USAGE);
    return 0;
  }
  const groups = new Map<string, Histogram>();
  let everything: Histogram | null = null;
  let unit = '';
  let scale = 1;
  try {
    for (const admin of a.admins) {
      let body: HistogramsBody;
      try {
        body = await fetchBody(admin, a);
      } catch (e) {
        out.stderr(`sluice stats: cannot read ${admin}: ${fetchFailure(e)}\n`);
        return 1;
      }
      unit = body.unit;
      scale = body.value_scale;
      for (const h of body.histograms) {
        const g = groupOf(h, a.by);
        if (g === null) continue;
        const decoded = decodeFromCompressedBase64(h.hdr, 64);
        if (a.hgrm !== null) {
          const copy = decodeFromCompressedBase64(h.hdr, 64);
          if (everything === null) everything = copy;
          else {
            everything.add(copy);
            copy.destroy();
          }
        }
        const acc = groups.get(g);
        if (acc === undefined) groups.set(g, decoded);
        else {
          acc.add(decoded);
          decoded.destroy();
        }
      }
    }
    // Latencies print in ms; counts as they are.
    const k = unit === 'seconds' ? scale * 1000 : scale;
    const shown = unit === 'seconds' ? 'ms' : unit;
    const rows = [...groups].sort(([x], [y]) => x.localeCompare(y));
    if (a.json) {
      const body = rows.map(([group, h]) => ({
        group,
        count: h.totalCount,
        p50: h.getValueAtPercentile(50) * k,
        p90: h.getValueAtPercentile(90) * k,
        p99: h.getValueAtPercentile(99) * k,
        p999: h.getValueAtPercentile(99.9) * k,
        max: h.maxValue * k,
      }));
      out.stdout(
        JSON.stringify(
          { metric: a.metric, view: a.view, unit: shown, instances: a.admins.length, groups: body },
          null,
          2,
        ) + '\n',
      );
    } else {
      const f = (v: number): string => (v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2));
      const table = textTable([
        [a.by, 'count', `p50 ${shown}`, `p90 ${shown}`, `p99 ${shown}`, `p99.9 ${shown}`, `max ${shown}`],
        ...rows.map(([group, h]) => [
          group,
          String(h.totalCount),
          f(h.getValueAtPercentile(50) * k),
          f(h.getValueAtPercentile(90) * k),
          f(h.getValueAtPercentile(99) * k),
          f(h.getValueAtPercentile(99.9) * k),
          f(h.maxValue * k),
        ]),
      ]);
      out.stdout(
        `${a.metric} (${a.view === 'window' ? 'sliding window' : 'since start'}), ${a.admins.length} instance${a.admins.length === 1 ? '' : 's'}\n${table.join('\n')}\n`,
      );
    }
    if (a.hgrm !== null) {
      const merged = everything;
      try {
        await writeFile(a.hgrm, merged === null ? '' : merged.outputPercentileDistribution(5, 1 / k));
      } catch (e) {
        out.stderr(`sluice stats: cannot write ${a.hgrm}: ${(e as Error).message}\n`);
        return 1;
      }
    }
    return 0;
  } finally {
    for (const h of groups.values()) h.destroy();
    everything?.destroy();
  }
}
