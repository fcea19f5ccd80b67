/**
 * Turns settings into a plan: which processes to start (stand-in nodes, proxies), pinned to which
 * CPUs, with which files and ports, and the URL and body of every target. Pure given a port source,
 * so the dry run prints exactly what a real run would start.
 */
import { join } from 'node:path';
import { BENCH_API_KEY, STREAM_CHUNKS } from './chat-fixtures.js';
import type { BenchSettings } from './bench-settings.js';
import {
  connectionsFor,
  selectTargets,
  sluiceVariants,
  upstreamsNeeded,
  type Target,
  type UpstreamName,
} from './bench-targets.js';
import {
  haproxyCfg,
  nginxConf,
  sluiceEnv,
  sluiceFullConfig,
  sluiceMinConfig,
  sluiceOverlayConfig,
  sluiceYaml,
  type NginxListener,
} from './proxy-configs.js';

/** A file the runner writes into the run folder before starting anything. */
export interface PlannedFile {
  path: string;
  text: string;
}

/** A long-running process of the benchmark. */
export interface ProcessSpec {
  /** `node-fast`, `nginx`, `bare-fast`, `sluice-min`, ... */
  name: string;
  role: 'node' | 'proxy';
  /** taskset CPU list. */
  cpus: string;
  command: string;
  args: string[];
  env: Record<string, string>;
  /** A port it listens on, probed until it answers HTTP. */
  port: number;
  /** Sluice configuration text, checked with Sluice's own loader before the run. */
  sluiceConfig: string | null;
}

/** One target, resolved. */
export interface PlannedTarget extends Target {
  url: string;
  conns: number;
  /** The request body file (written by the runner). */
  bodyFile: string;
  /** SSE writes per response: `STREAM_CHUNKS` for streamed targets, else 0. */
  chunksPerReq: number;
  /** Process name of the stand-in node behind it. */
  nodeProcess: string;
}

export interface BenchPlan {
  settings: BenchSettings;
  dir: string;
  files: PlannedFile[];
  processes: ProcessSpec[];
  targets: PlannedTarget[];
  /** wrk script (in the source tree). */
  luaScript: string;
}

/** Where things are: the Sluice checkout, the compiled benchmark, the folder of this run. */
export interface PlanPaths {
  /** Project root (holds `bin/sluice.js` and `loadtest/bench/post.lua`). */
  root: string;
  /** Folder of the compiled benchmark (holds `bench-child.js`). */
  distBench: string;
  /** This run's folder (configs, logs, bodies, results). */
  runDir: string;
  /** The Node binary to run children with. */
  node: string;
}

/** Overlay files already read: path → text. */
export type OverlayTexts = ReadonlyMap<string, string>;

/** Gives a free loopback port. */
export type PortSource = () => Promise<number>;

const NODE_DELAY = (u: UpstreamName, s: BenchSettings): number => (u === 'slow' ? s.slowDelayMs : 0);
const NODE_GAP = (u: UpstreamName, s: BenchSettings): number => (u === 'paced' ? s.paceMs : 0);

/** The request files of the plan (the runner writes their text from `chat-fixtures`). */
export function bodyFiles(runDir: string): { chat: string; stream: string } {
  return { chat: join(runDir, 'chat.json'), stream: join(runDir, 'chat-stream.json') };
}

/**
 * Builds the plan for `settings`. Ports come from `ports` (free loopback ports); overlay files must
 * be read already. Throws on an unknown target name or a malformed overlay.
 */
export async function buildPlan(
  settings: BenchSettings,
  paths: PlanPaths,
  ports: PortSource,
  overlays: OverlayTexts,
): Promise<BenchPlan> {
  const targets = selectTargets(settings);
  const files: PlannedFile[] = [];
  const processes: ProcessSpec[] = [];
  const child = join(paths.distBench, 'bench-child.js');
  const bodies = bodyFiles(paths.runDir);

  const nodeUrl = new Map<UpstreamName, string>();
  for (const u of upstreamsNeeded(targets)) {
    const port = await ports();
    nodeUrl.set(u, `http://127.0.0.1:${port}`);
    processes.push({
      name: `node-${u}`,
      role: 'node',
      cpus: settings.loadCpus,
      command: paths.node,
      args: [
        child,
        'stand-in',
        '--port',
        String(port),
        '--delay-ms',
        String(NODE_DELAY(u, settings)),
        '--chunk-gap-ms',
        String(NODE_GAP(u, settings)),
      ],
      env: {},
      port,
      sluiceConfig: null,
    });
  }

  const url = new Map<string, string>();
  // nginx: one process, one listener per target that uses it.
  const nginxTargets = targets.filter((x) => x.proxy === 'nginx');
  if (nginxTargets.length > 0) {
    const listeners: NginxListener[] = [];
    for (const x of nginxTargets) {
      const port = await ports();
      listeners.push({ port, upstream: nodeUrl.get(x.upstream)!, unbuffered: x.body === 'stream' });
      url.set(x.name, `http://127.0.0.1:${port}`);
    }
    const prefix = join(paths.runDir, 'nginx');
    const conf = join(prefix, 'nginx.conf');
    files.push({ path: conf, text: nginxConf(listeners) });
    processes.push({
      name: 'nginx',
      role: 'proxy',
      cpus: settings.proxyCpus,
      command: 'nginx',
      args: ['-p', `${prefix}/`, '-e', 'stderr', '-c', conf, '-g', 'pid nginx.pid;'],
      env: {},
      port: listeners[0]!.port,
      sluiceConfig: null,
    });
  }
  if (targets.some((x) => x.proxy === 'haproxy')) {
    const port = await ports();
    const cfg = join(paths.runDir, 'haproxy.cfg');
    files.push({ path: cfg, text: haproxyCfg(port, nodeUrl.get('fast')!) });
    processes.push({
      name: 'haproxy',
      role: 'proxy',
      cpus: settings.proxyCpus,
      command: 'haproxy',
      args: ['-db', '-f', cfg],
      env: {},
      port,
      sluiceConfig: null,
    });
    url.set('haproxy', `http://127.0.0.1:${port}`);
  }
  const serverPort = new Map<string, number>();
  for (const x of targets) {
    if (x.proxy !== 'bare' || serverPort.has(x.server)) continue;
    const port = await ports();
    serverPort.set(x.server, port);
    processes.push({
      name: x.server,
      role: 'proxy',
      cpus: settings.proxyCpus,
      command: paths.node,
      args: [child, 'bare-forwarder', '--port', String(port), '--upstream', nodeUrl.get(x.upstream)!],
      env: {},
      port,
      sluiceConfig: null,
    });
  }
  for (const v of sluiceVariants(targets, settings.extraConfigs)) {
    const port = await ports();
    const p = { port, adminPort: await ports(), upstream: nodeUrl.get(v.upstream)! };
    serverPort.set(v.server, port);
    let doc: Record<string, unknown>;
    let what: string;
    if (v.config === 'min') {
      doc = sluiceMinConfig(p);
      what = 'Sluice, one pool, one route';
    } else if (v.config === 'full') {
      doc = sluiceFullConfig(p);
      what = 'Sluice, every per-request feature on';
    } else {
      const file = v.config.overlay;
      doc = sluiceOverlayConfig(p, overlays.get(file) ?? '', file);
      what = `Sluice, the minimal configuration with ${file} laid over it`;
    }
    const text = sluiceYaml(doc, what);
    const path = join(paths.runDir, `${v.server}.yaml`);
    files.push({ path, text });
    processes.push({
      name: v.server,
      role: 'proxy',
      cpus: settings.proxyCpus,
      command: paths.node,
      args: [join(paths.root, 'bin', 'sluice.js'), 'serve', '--no-watch', '--config', path],
      env: sluiceEnv(),
      port,
      sluiceConfig: text,
    });
  }

  const planned: PlannedTarget[] = targets.map((x) => {
    let base: string;
    if (x.proxy === 'direct') base = nodeUrl.get(x.upstream)!;
    else if (x.proxy === 'nginx' || x.proxy === 'haproxy') base = url.get(x.name)!;
    else base = `http://127.0.0.1:${serverPort.get(x.server)!}`;
    return {
      ...x,
      url: `${base}/v1/chat/completions`,
      conns: connectionsFor(x.case, settings),
      bodyFile: x.body === 'stream' ? bodies.stream : bodies.chat,
      chunksPerReq: x.body === 'stream' ? STREAM_CHUNKS : 0,
      nodeProcess: `node-${x.upstream}`,
    };
  });
  return {
    settings,
    dir: paths.runDir,
    files,
    processes,
    targets: planned,
    luaScript: join(paths.root, 'loadtest', 'bench', 'post.lua'),
  };
}

/** The wrk command line of one run: `taskset -c LOAD wrk -t1 -cN -dDs --timeout 10s -s post.lua URL`. */
export function wrkArgs(plan: BenchPlan, target: PlannedTarget, seconds: number): string[] {
  return [
    '-c',
    plan.settings.loadCpus,
    'wrk',
    '-t1',
    `-c${target.conns}`,
    `-d${seconds}s`,
    '--timeout',
    '10s',
    '-s',
    plan.luaScript,
    target.url,
  ];
}

/** Environment of a wrk run: the body file and the API key the script sends. */
export function wrkEnv(target: PlannedTarget): Record<string, string> {
  return { BODY_FILE: target.bodyFile, API_KEY: BENCH_API_KEY };
}

/** The plan as text, for `--dry-run`: what would start where, and every target's load. */
export function describePlan(plan: BenchPlan): string {
  const s = plan.settings;
  const lines = [
    `settings: RUNS=${s.runs} DUR=${s.durS} WARM=${s.warmS} PREWARM=${s.prewarmS} CONNS=${s.conns} ` +
      `SLOW_CONNS=${s.slowConns} PACED_CONNS=${s.pacedConns} SLOW_DELAY_MS=${s.slowDelayMs} ` +
      `PACE_MS=${s.paceMs} PROXY_CPUS=${s.proxyCpus} LOAD_CPUS=${s.loadCpus}`,
    `run folder: ${plan.dir}`,
    'processes:',
    ...plan.processes.map(
      (p) =>
        `  ${p.name.padEnd(14)} cpu ${p.cpus.padEnd(4)} taskset -c ${p.cpus} ${p.command} ${p.args.join(' ')}`,
    ),
    'targets:',
    ...plan.targets.map(
      (x) =>
        `  ${x.name.padEnd(16)} ${x.case.padEnd(6)} ${String(x.conns).padStart(4)} conns  ${x.url}  ` +
        `(taskset ${wrkArgs(plan, x, s.durS).join(' ')})`,
    ),
    'files:',
    ...plan.files.map((f) => `  ${f.path}`),
  ];
  return `${lines.join('\n')}\n`;
}
