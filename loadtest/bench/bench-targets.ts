/**
 * What the proxy benchmark measures: the catalogue of targets (a proxy, or none, in front of one
 * stand-in node, under one kind of load) and the server processes they need. Pure: deciding what
 * runs is apart from running it, so a dry run and the tests can check the plan.
 */
import { basename, extname } from 'node:path';
import type { BenchSettings } from './bench-settings.js';

/** The four kinds of load, each a table in the report. */
export const BenchCase = {
  /** The node answers the chat POST at once; the proxy's CPU per request is the figure. */
  fast: 'fast',
  /** The node answers after `SLOW_DELAY_MS`, many connections: the proxy must not cap throughput. */
  slow: 'slow',
  /** `stream: true`, the node writes the whole SSE stream at once: CPU per forwarded chunk. */
  stream: 'stream',
  /** `stream: true`, the node writes one SSE event every `PACE_MS`: CPU per forwarded chunk. */
  paced: 'paced',
} as const;
export type BenchCase = (typeof BenchCase)[keyof typeof BenchCase];

/** Which stand-in node a target reaches. */
export type UpstreamName = 'fast' | 'slow' | 'paced';

/** The kind of proxy in front of the node. */
export type ProxyKind = 'direct' | 'nginx' | 'haproxy' | 'bare' | 'sluice';

/** One measured target. */
export interface Target {
  /** Name in TARGETS and in the results (`sluice-min`, `nginx-paced`). */
  name: string;
  case: BenchCase;
  proxy: ProxyKind;
  /** The server process that serves it (`nginx`, `bare-fast`, `sluice-min`); '' for direct. */
  server: string;
  /** The nginx listener it uses (nginx serves several), else ''. */
  listener: string;
  upstream: UpstreamName;
  /** Request body: the plain chat POST or the streamed one. */
  body: 'chat' | 'stream';
  /** Description in the report. */
  label: string;
}

/** A Sluice configuration the benchmark runs, with the node it points at. */
export interface SluiceVariant {
  /** Process name, also the target name for the fast case (`sluice-min`, `sluice-x-plugins`). */
  server: string;
  /** `min`, `full`, or an overlay file applied on `min`. */
  config: 'min' | 'full' | { overlay: string };
  upstream: UpstreamName;
}

function t(
  name: string,
  c: BenchCase,
  proxy: ProxyKind,
  server: string,
  upstream: UpstreamName,
  label: string,
  listener = '',
): Target {
  const body = c === BenchCase.stream || c === BenchCase.paced ? 'stream' : 'chat';
  return { name, case: c, proxy, server, listener, upstream, body, label };
}

/** Target name of an extra configuration file: `sluice-x-` + its base name without extension. */
export function extraTargetName(file: string): string {
  const base = basename(file, extname(file)).replace(/[^A-Za-z0-9_-]/g, '-');
  return `sluice-x-${base}`;
}

/** Every target, in run and report order (extra configurations after `sluice-full`). */
export function catalogue(extraConfigs: readonly string[] = []): Target[] {
  const { fast, slow, stream, paced } = BenchCase;
  return [
    t('direct', fast, 'direct', '', 'fast', 'direct to the node (no proxy)'),
    t('nginx', fast, 'nginx', 'nginx', 'fast', 'nginx (1 worker)', 'fast'),
    t('haproxy', fast, 'haproxy', 'haproxy', 'fast', 'HAProxy (1 thread)'),
    t('bare', fast, 'bare', 'bare-fast', 'fast', 'bare uWS + undici forwarder'),
    t('sluice-min', fast, 'sluice', 'sluice-min', 'fast', 'Sluice, one pool, one route, round-robin'),
    t(
      'sluice-full',
      fast,
      'sluice',
      'sluice-full',
      'fast',
      'Sluice, tenant key + limits, admission, prefix-affinity consistent hash, health, outlier ejection, retry budget, route_header',
    ),
    ...extraConfigs.map((file) => {
      const name = extraTargetName(file);
      return t(name, fast, 'sluice', name, 'fast', `Sluice, min + ${basename(file)}`);
    }),
    t('direct-slow', slow, 'direct', '', 'slow', 'direct to the node (no proxy)'),
    t('nginx-slow', slow, 'nginx', 'nginx', 'slow', 'nginx (1 worker)', 'slow'),
    t('bare-slow', slow, 'bare', 'bare-slow', 'slow', 'bare uWS + undici forwarder'),
    t('sluice-slow', slow, 'sluice', 'sluice-slow', 'slow', 'Sluice, shipped defaults'),
    t('direct-stream', stream, 'direct', '', 'fast', 'direct to the node (no proxy)'),
    t('nginx-stream', stream, 'nginx', 'nginx', 'fast', 'nginx (1 worker, proxy_buffering off)', 'stream'),
    t('bare-stream', stream, 'bare', 'bare-fast', 'fast', 'bare uWS + undici forwarder'),
    t('sluice-stream', stream, 'sluice', 'sluice-min', 'fast', 'Sluice, one pool, one route'),
    t('direct-paced', paced, 'direct', '', 'paced', 'direct to the node (no proxy)'),
    t('nginx-paced', paced, 'nginx', 'nginx', 'paced', 'nginx (1 worker, proxy_buffering off)', 'paced'),
    t('bare-paced', paced, 'bare', 'bare-paced', 'paced', 'bare uWS + undici forwarder'),
    t('sluice-paced', paced, 'sluice', 'sluice-paced', 'paced', 'Sluice, one pool, one route'),
  ];
}

/** A TARGETS entry that names no target. */
export class UnknownTargetError extends Error {
  override readonly name = 'UnknownTargetError';
}

/** The targets the settings select, in catalogue order. Throws on an unknown name. */
export function selectTargets(settings: BenchSettings): Target[] {
  const all = catalogue(settings.extraConfigs);
  const wanted = settings.targets;
  if (wanted === null) return all;
  const names = new Set(all.map((x) => x.name));
  const unknown = [...wanted].filter((n) => !names.has(n));
  if (unknown.length > 0) {
    throw new UnknownTargetError(`unknown target(s) ${unknown.join(', ')}; known: ${[...names].join(' ')}`);
  }
  return all.filter((x) => wanted.has(x.name));
}

/** The Sluice processes the targets need, one per configuration and node. */
export function sluiceVariants(targets: readonly Target[], extraConfigs: readonly string[]): SluiceVariant[] {
  const byServer = new Map<string, SluiceVariant>();
  for (const x of targets) {
    if (x.proxy !== 'sluice' || byServer.has(x.server)) continue;
    let config: SluiceVariant['config'] = 'min';
    if (x.server === 'sluice-full') config = 'full';
    const extra = extraConfigs.find((f) => extraTargetName(f) === x.server);
    if (extra !== undefined) config = { overlay: extra };
    byServer.set(x.server, { server: x.server, config, upstream: x.upstream });
  }
  return [...byServer.values()];
}

/** The stand-in nodes the targets need. */
export function upstreamsNeeded(targets: readonly Target[]): UpstreamName[] {
  const order: UpstreamName[] = ['fast', 'slow', 'paced'];
  const used = new Set(targets.map((x) => x.upstream));
  return order.filter((u) => used.has(u));
}

/** Connections the load generator opens for a target's case. */
export function connectionsFor(c: BenchCase, s: BenchSettings): number {
  if (c === BenchCase.slow) return s.slowConns;
  if (c === BenchCase.paced) return s.pacedConns;
  return s.conns;
}
