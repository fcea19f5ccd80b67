/**
 * `sluice capacity`: how many GPU nodes a load needs, from numbers given on the command line or
 * from a running Sluice's `GET /admin/capacity`. Resolves to the exit code; never calls
 * process.exit (the bin script does) and never changes the Sluice it reads.
 */
import {
  CapacityInputError,
  formatFormula,
  recommendNodes,
  roundForDisplay,
  type CapacityRecommendation,
} from './capacity-model.js';
import type { CapacityView, PoolCapacityView } from './capacity-view.js';
import { DEFAULT_TARGET_UTILISATION } from './pool-capacity.js';
import { adminHeaders, fetchFailure, statusHint } from '../admin/admin-client.js';
import { httpFetch } from '../runtime/optional-modules.js';

/** Where the command writes; the process streams by default, a buffer in tests. */
export interface CapacityCliOutput {
  stdout(text: string): void;
  stderr(text: string): void;
}

const processOutput: CapacityCliOutput = {
  stdout: (text) => void process.stdout.write(text),
  stderr: (text) => void process.stderr.write(text),
};

/** Usage text, printed by `--help` and after an argument error. */
export const CAPACITY_USAGE = `usage: sluice capacity --items-per-second N --time-per-item-ms T --batch-size B
                       [--utilisation U] [--nodes N] [--json]
       sluice capacity --admin URL [--pool NAME] [--utilisation U] [--json]

How many GPU nodes for a load:
  nodes = ceil(items/s × time per item ÷ batch size ÷ target utilisation)

  --items-per-second N  load: items (requests) per second
  --time-per-item-ms T  mean model time of one upstream call, ms
  --batch-size B        items one node works on at once during that time
                        (items per call × concurrent calls per node)
  --utilisation U       target utilisation, in (0, 1] (default ${DEFAULT_TARGET_UTILISATION}; with --admin,
                        overrides each pool's capacity.target_utilisation)
  --nodes N             nodes serving today: also print their utilisation
  --admin URL           read the observed inputs from a running Sluice's admin API
                        (e.g. http://127.0.0.1:9901) and recommend per pool
  --pool NAME           with --admin: only this pool
  --json                print JSON instead of text
Exit status: 0 answered, 1 the admin API could not be read, 2 bad arguments.
`;

/** An argument the command cannot accept (exit 2). */
export class CapacityCliArgError extends Error {
  override readonly name = 'CapacityCliArgError';
}

/** Parsed `sluice capacity` arguments. */
export interface CapacityCliArgs {
  itemsPerSecond: number | null; // items/s
  timePerItemMs: number | null; // ms
  batchSize: number | null; // items
  /** Null: the default (or, with `--admin`, each pool's own target). */
  utilisation: number | null; // ratio
  currentNodes: number | null; // nodes
  admin: string | null;
  pool: string | null;
  json: boolean;
  help: boolean;
}

const VALUE_FLAGS = [
  '--items-per-second',
  '--time-per-item-ms',
  '--batch-size',
  '--utilisation',
  '--nodes',
  '--admin',
  '--pool',
];

function num(flag: string, raw: string): number {
  const n = Number(raw);
  if (raw.trim() === '' || !Number.isFinite(n))
    throw new CapacityCliArgError(`${flag} needs a number, got "${raw}"`);
  return n;
}

/** Parses the arguments after `capacity`; throws `CapacityCliArgError` on a bad or missing one. */
export function parseCapacityArgs(argv: readonly string[]): CapacityCliArgs {
  const a: CapacityCliArgs = {
    itemsPerSecond: null,
    timePerItemMs: null,
    batchSize: null,
    utilisation: null,
    currentNodes: null,
    admin: null,
    pool: null,
    json: false,
    help: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--help' || arg === '-h') a.help = true;
    else if (arg === '--json') a.json = true;
    else {
      const eq = arg.indexOf('=');
      const flag = eq < 0 ? arg : arg.slice(0, eq);
      if (!VALUE_FLAGS.includes(flag))
        throw new CapacityCliArgError(
          arg.startsWith('-') ? `unknown option ${flag}` : `unexpected argument "${arg}"`,
        );
      let value = eq < 0 ? undefined : arg.slice(eq + 1);
      if (value === undefined) {
        value = argv[i + 1];
        if (value === undefined || value.startsWith('--'))
          throw new CapacityCliArgError(`${flag} needs a value`);
        i++;
      }
      if (flag === '--items-per-second') a.itemsPerSecond = num(flag, value);
      else if (flag === '--time-per-item-ms') a.timePerItemMs = num(flag, value);
      else if (flag === '--batch-size') a.batchSize = num(flag, value);
      else if (flag === '--utilisation') a.utilisation = num(flag, value);
      else if (flag === '--nodes') a.currentNodes = num(flag, value);
      else if (flag === '--admin') a.admin = value;
      else a.pool = value;
    }
  }
  if (a.help) return a;
  const given = [a.itemsPerSecond, a.timePerItemMs, a.batchSize].filter((v) => v !== null).length;
  if (a.admin !== null) {
    if (given > 0 || a.currentNodes !== null)
      throw new CapacityCliArgError(
        '--admin reads the inputs from Sluice: drop --items-per-second, --time-per-item-ms, --batch-size and --nodes',
      );
    let url: URL;
    try {
      url = new URL(a.admin);
    } catch {
      throw new CapacityCliArgError(`--admin needs a URL like http://127.0.0.1:9901, got "${a.admin}"`);
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:')
      throw new CapacityCliArgError(`--admin needs an http(s) URL, got "${a.admin}"`);
  } else {
    if (a.pool !== null) throw new CapacityCliArgError('--pool needs --admin');
    if (given < 3)
      throw new CapacityCliArgError(
        'give --items-per-second, --time-per-item-ms and --batch-size, or --admin URL',
      );
  }
  if (a.utilisation !== null && (a.utilisation <= 0 || a.utilisation > 1))
    throw new CapacityCliArgError(`--utilisation must be in (0, 1], got ${a.utilisation}`);
  return a;
}

const d = roundForDisplay;

function row(name: string, value: string, source: string): string {
  return `  ${name.padEnd(20)}${value.padEnd(16)}${source}\n`;
}

function fromArguments(a: CapacityCliArgs, out: CapacityCliOutput): number {
  let rec: CapacityRecommendation;
  try {
    rec = recommendNodes({
      itemsPerSecond: a.itemsPerSecond!,
      timePerItemMs: a.timePerItemMs!,
      batchSize: a.batchSize!,
      targetUtilisation: a.utilisation ?? DEFAULT_TARGET_UTILISATION,
      currentNodes: a.currentNodes,
    });
  } catch (e) {
    if (!(e instanceof CapacityInputError)) throw e;
    throw new CapacityCliArgError(e.message);
  }
  const uSource = a.utilisation === null ? 'default' : '--utilisation';
  if (a.json) {
    const i = rec.inputs;
    const body = {
      recommended_nodes: rec.nodes,
      busy_nodes: rec.busyNodes,
      utilisation_now: rec.utilisationNow,
      inputs: {
        items_per_second: { value: i.itemsPerSecond, source: '--items-per-second' },
        time_per_item_ms: { value: i.timePerItemMs, source: '--time-per-item-ms' },
        batch_size: { value: i.batchSize, source: '--batch-size' },
        target_utilisation: { value: i.targetUtilisation, source: uSource },
        current_nodes: { value: i.currentNodes, source: '--nodes' },
      },
      formula: formatFormula(rec),
    };
    out.stdout(JSON.stringify(body, null, 2) + '\n');
    return 0;
  }
  let text = 'inputs:\n';
  text += row('items per second', `${d(rec.inputs.itemsPerSecond)}`, '--items-per-second');
  text += row('time per item', `${d(rec.inputs.timePerItemMs)} ms`, '--time-per-item-ms');
  text += row('batch size', `${d(rec.inputs.batchSize)} items`, '--batch-size');
  text += row('target utilisation', `${d(rec.inputs.targetUtilisation)}`, uSource);
  text += `${formatFormula(rec)}\n`;
  if (rec.utilisationNow !== null)
    text += `utilisation of the ${rec.inputs.currentNodes} nodes now: ${d(rec.utilisationNow, 3)}\n`;
  text += `recommended nodes: ${rec.nodes}\n`;
  out.stdout(text);
  return 0;
}

/** Applies `--utilisation` to a pool read from the admin API: same observed inputs, new target. */
function withUtilisation(p: PoolCapacityView, u: number): PoolCapacityView {
  const items = p.inputs.items_per_second.value;
  const time = p.inputs.time_per_item_ms.value;
  const batch = p.inputs.batch_size.value;
  const next: PoolCapacityView = {
    ...p,
    inputs: { ...p.inputs, target_utilisation: { value: u, source: '--utilisation' } },
  };
  if (items !== null && time !== null && batch !== null) {
    const rec = recommendNodes({
      itemsPerSecond: items,
      timePerItemMs: time,
      batchSize: batch,
      targetUtilisation: u,
    });
    next.recommended_nodes = rec.nodes;
    next.formula = formatFormula(rec);
  }
  return next;
}

function poolText(p: PoolCapacityView): string {
  const i = p.inputs;
  const b = i.batch_size;
  const v = (x: number | null, unit = ''): string => (x === null ? 'unknown' : `${d(x)}${unit}`);
  let text =
    `pool ${p.pool}: ${p.nodes} nodes configured, ${p.available_nodes} available; ` +
    `observed over ${d(p.span_ms / 1000, 3)} s (window ${d(p.window_ms / 1000)} s)\n`;
  text += row('items per second', v(i.items_per_second.value), i.items_per_second.source);
  text += row('time per item', v(i.time_per_item_ms.value, ' ms'), i.time_per_item_ms.source);
  text += row(
    'batch size',
    v(b.value, ' items'),
    `${v(b.items_per_call)} items/call (observed) × ${v(b.calls_per_node)} calls/node` +
      (b.calls_per_node_source === null ? '' : ` (${b.calls_per_node_source})`),
  );
  text += row('target utilisation', v(i.target_utilisation.value), i.target_utilisation.source);
  if (p.formula !== null) text += `  ${p.formula}\n`;
  if (p.utilisation_now !== null)
    text += `  utilisation of the ${p.nodes} nodes now: ${d(p.utilisation_now, 3)}\n`;
  if (p.note !== null) text += `  note: ${p.note}\n`;
  text += `  recommended nodes: ${p.recommended_nodes}\n`;
  return text;
}

async function fromAdmin(a: CapacityCliArgs, out: CapacityCliOutput): Promise<number> {
  const url = new URL('/admin/capacity', a.admin!);
  let view: CapacityView;
  try {
    const res = await httpFetch(url, { headers: adminHeaders(), signal: AbortSignal.timeout(10_000) });
    const text = await res.text();
    if (res.status !== 200) {
      out.stderr(
        `sluice capacity: ${url.href} answered ${res.status}: ${text.trim().slice(0, 300)}${statusHint(res.status)}\n`,
      );
      return 1;
    }
    view = JSON.parse(text) as CapacityView;
    if (!Array.isArray(view.pools)) throw new Error('the answer has no "pools" list');
  } catch (e) {
    out.stderr(`sluice capacity: cannot read ${url.href}: ${fetchFailure(e)}\n`);
    return 1;
  }
  let pools = view.pools;
  if (a.pool !== null) {
    pools = pools.filter((p) => p.pool === a.pool);
    if (pools.length === 0) {
      const names = view.pools.map((p) => p.pool).join(', ');
      throw new CapacityCliArgError(`no pool "${a.pool}" in ${url.href} (pools: ${names || 'none'})`);
    }
  }
  if (a.utilisation !== null) {
    const u = a.utilisation;
    pools = pools.map((p) => withUtilisation(p, u));
  }
  if (a.json) out.stdout(JSON.stringify({ formula: view.formula, pools }, null, 2) + '\n');
  else out.stdout(`${view.formula}\n\n${pools.map(poolText).join('\n')}`);
  return 0;
}

/**
 * Runs `sluice capacity` with `argv` (the arguments after `capacity`). Resolves 0 with an answer,
 * 1 when the admin API cannot be read, 2 on a bad argument (message and usage on stderr).
 *
 * @example
 * await runCapacityCli(['--items-per-second', '40', '--time-per-item-ms', '100', '--batch-size', '4']);
 */
export async function runCapacityCli(
  argv: string[],
  output: CapacityCliOutput = processOutput,
): Promise<number> {
  try {
    const args = parseCapacityArgs(argv);
    if (args.help) {
      output.stdout(CAPACITY_USAGE);
      return 0;
    }
    return args.admin === null ? fromArguments(args, output) : await fromAdmin(args, output);
  } catch (e) {
    if (!(e instanceof CapacityCliArgError)) throw e;
    output.stderr(`sluice capacity: ${e.message}\n\n${CAPACITY_USAGE}`);
    return 2;
  }
}
