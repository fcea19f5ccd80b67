/**
 * What a benchmark run ran on: date, kernel, cores, CPU model, load average, the versions of Node,
 * nginx, HAProxy, wrk, uWebSockets.js and undici, the checkout's commit, and the settings. Printed
 * above the report and kept beside the results, so a figure can always be traced to its setup.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';
import { findSluiceRoot } from '../../config/sluice-root.js';
import type { BenchPlan } from './bench-plan.js';

/** First line a command prints (stdout or stderr), or `(not installed)`. */
function versionOf(command: string, args: string[]): string {
  const r = spawnSync(command, args, { encoding: 'utf8', timeout: 5000 });
  if (r.error !== undefined) return '(not installed)';
  return `${r.stdout}${r.stderr}`.trim().split('\n')[0] ?? '';
}

function packageVersion(root: string, name: string): string {
  try {
    const pkg = JSON.parse(readFileSync(join(root, 'node_modules', name, 'package.json'), 'utf8')) as {
      version?: string;
      name?: string;
    };
    return `${pkg.name ?? name}@${pkg.version ?? '?'}`;
  } catch {
    return '(not installed)';
  }
}

/** The description, one `key: value` line each. */
export function describeMachine(plan: BenchPlan): string {
  const root = findSluiceRoot();
  const s = plan.settings;
  const commit = spawnSync('git', ['-C', root, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' });
  const dirty = spawnSync('git', ['-C', root, 'status', '--porcelain', '--untracked-files=no'], {
    encoding: 'utf8',
  });
  const lines = [
    `date: ${new Date().toISOString()}`,
    `kernel: ${versionOf('uname', ['-r'])}; cores: ${cpus().length}; cpu: ${cpus()[0]?.model ?? '?'}`,
    `load average at start: ${loadavg()
      .map((l) => l.toFixed(2))
      .join(' ')}`,
    `node: ${process.version}; ${packageVersion(root, 'uWebSockets.js')}; ${packageVersion(root, 'undici')}`,
    `nginx: ${versionOf('nginx', ['-v'])}`,
    `haproxy: ${versionOf('haproxy', ['-v'])}`,
    `wrk: ${versionOf('wrk', ['-v'])}`,
    `sluice commit: ${commit.stdout.trim() || '?'}${dirty.stdout.trim() === '' ? '' : ' (with uncommitted changes)'}`,
    `settings: RUNS=${s.runs} DUR=${s.durS} WARM=${s.warmS} PREWARM=${s.prewarmS} CONNS=${s.conns} ` +
      `SLOW_CONNS=${s.slowConns} PACED_CONNS=${s.pacedConns} SLOW_DELAY_MS=${s.slowDelayMs} PACE_MS=${s.paceMs} ` +
      `PROXY_CPUS=${s.proxyCpus} LOAD_CPUS=${s.loadCpus}` +
      (s.extraConfigs.length > 0 ? ` EXTRA_SLUICE_CONFIGS="${s.extraConfigs.join(' ')}"` : ''),
  ];
  return `${lines.join('\n')}\n`;
}
