/**
 * Checks a scenario's embedded Sluice config before anything starts: placeholders, the config schema
 * and semantic rules (Sluice's own loader, read-only), and the loopback rule for every address the
 * proxy would bind or dial. Problems point into the scenario file (inline config) or the config file.
 */

import { formatConfigPath, type ConfigPath } from '../../config/config-issue.js';
import { locatePath } from '../../config/yaml-locate.js';
import { parseYaml } from '../../config/yaml-parse.js';
import { isLoopbackAddress, loopbackUrlProblem } from './loopback.js';
import { expandTemplate, templateProblems } from './sluice-config-template.js';
import type { SluiceSpec } from './scenario-types.js';

/** A problem with its place: file, 1-based line and column, a path and the message. */
export interface LocatedProblem {
  file: string;
  line: number;
  col: number;
  /** Where in the scenario (and in the config), e.g. `sluice.config listeners[0].address`. */
  path: string;
  message: string;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Addresses the config binds or dials that are not loopback, as (config path, message). */
function loopbackIssues(data: unknown): { path: ConfigPath; message: string }[] {
  const out: { path: ConfigPath; message: string }[] = [];
  if (!isRecord(data)) return out;
  const listeners = data['listeners'];
  if (!Array.isArray(listeners)) {
    out.push({
      path: [],
      message:
        'declare listeners: Sluice would otherwise listen on 0.0.0.0:8080; use e.g. listeners: [{name: public, address: 127.0.0.1, port: {{port}}}]',
    });
  } else {
    listeners.forEach((l, i) => {
      const address = isRecord(l) ? (l['address'] ?? '0.0.0.0') : undefined;
      if (typeof address === 'string' && !isLoopbackAddress(address)) {
        const where: ConfigPath =
          isRecord(l) && 'address' in l ? ['listeners', i, 'address'] : ['listeners', i];
        out.push({
          path: where,
          message: `listener address ${address} is not loopback; load tests bind 127.0.0.0/8 only`,
        });
      }
    });
  }
  for (const section of ['admin', 'simulator']) {
    const s = data[section];
    const address = isRecord(s) ? s['address'] : undefined;
    if (typeof address === 'string' && !isLoopbackAddress(address)) {
      out.push({
        path: [section, 'address'],
        message: `${address} is not loopback; load tests bind 127.0.0.0/8 only`,
      });
    }
  }
  const pools = data['pools'];
  if (Array.isArray(pools)) {
    pools.forEach((p, i) => {
      const nodes = isRecord(p) ? p['nodes'] : undefined;
      if (!Array.isArray(nodes)) return;
      nodes.forEach((n, j) => {
        const url = isRecord(n) ? n['url'] : undefined;
        const problem = typeof url === 'string' ? loopbackUrlProblem(url) : undefined;
        if (problem !== undefined) out.push({ path: ['pools', i, 'nodes', j, 'url'], message: problem });
      });
    });
  }
  return out;
}

/**
 * Every problem of `spec`'s config once its placeholders are filled with stand-in values
 * (`nodes` = the fleet size, or null without a fleet). `keyPath` names the config's key in the
 * scenario, e.g. `variants[1].sluice.config`. Empty when the config would start.
 */
export async function checkSluiceConfig(
  spec: SluiceSpec,
  nodes: number | null,
  keyPath: string,
): Promise<LocatedProblem[]> {
  const { origin } = spec;
  const place = (line: number, col: number, path: string, message: string): LocatedProblem => ({
    file: origin.file,
    line: line + origin.lineOffset,
    col: col + origin.colOffset,
    path: path === '' ? keyPath : `${keyPath} ${path}`,
    message,
  });
  const bad = templateProblems(spec.template, nodes);
  if (bad.length > 0) return bad.map((p) => place(p.line, p.col, '', p.message));
  const text = expandTemplate(spec.template, {
    nodeUrls: Array.from({ length: nodes ?? 0 }, (_, i) => `http://127.0.0.1:${20001 + i}`),
    port: 1,
    adminPort: 2,
  });
  // The loader compiles config/schema.json when imported; load it only when a config is checked.
  const { parseConfig } = await import('../../config/loader.js');
  const result = parseConfig(text, origin.file);
  if (!result.ok) return result.errors.map((e) => place(e.line, e.col, e.path, e.message));
  const parsed = parseYaml(text);
  return loopbackIssues(parsed.data).map((issue) => {
    const at = locatePath(parsed.source, issue.path, 'value');
    return place(at.line, at.col, formatConfigPath(issue.path), issue.message);
  });
}
