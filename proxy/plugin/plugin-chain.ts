/**
 * Plugin instances and their compiled chains. An instance is one `plugins[]` entry of a config,
 * created with the plan and retired with it. A chain is what one route runs on one listener: the
 * listener's instances, then the route's, compiled once per plan into one array per phase, so a
 * phase without hooks costs one length check. The request path never looks a plugin up by name.
 */
import { PHASES, type PhaseName, type PluginHooks } from '../../plugins/api.js';
import type { Logger } from '../runtime/logger.js';
import type { Series } from './plugin-metrics.js';

/** Phase numbers, in lifecycle order (indexes into PHASES). */
export const Phase = {
  request: 0,
  route: 1,
  upstreamRequest: 2,
  responseHead: 3,
  responseChunk: 4,
  done: 5,
} as const;
export type Phase = (typeof Phase)[keyof typeof Phase];

/** The hook names by phase number. */
export const PHASE_NAMES: readonly PhaseName[] = PHASES;

/** Minimum time between two log lines about one instance's failures, ms. */
const FAILURE_LOG_INTERVAL_MS = 1000;

/** One configured plugin instance with its hooks. */
export class PluginInstance {
  /** Instance name from the config (`plugins[].name`). */
  readonly name: string;
  /** The plugin's own name and version. */
  readonly plugin: string;
  readonly version: string;
  readonly hooks: PluginHooks;
  /** Longest an async hook may take, ms. */
  readonly timeoutMs: number;
  /** Skip a failing hook instead of failing the request. */
  readonly failOpen: boolean;
  /** `sluice_plugin_errors_total{plugin=name,phase}` by phase number. */
  readonly errors: readonly Series[];
  readonly log: Logger;
  /** Monotonic time of the last failure log line, ms. */
  private lastLogMs = -Infinity;

  constructor(
    name: string,
    plugin: string,
    version: string,
    hooks: PluginHooks,
    timeoutMs: number,
    failOpen: boolean,
    errors: readonly Series[],
    log: Logger,
  ) {
    this.name = name;
    this.plugin = plugin;
    this.version = version;
    this.hooks = hooks;
    this.timeoutMs = timeoutMs;
    this.failOpen = failOpen;
    this.errors = errors;
    this.log = log;
  }

  /** Counts a failure and logs it (at most one line per second per instance). */
  failed(phase: Phase, message: string, now: number): void {
    const s = this.errors[phase];
    if (s !== undefined) s.value++;
    if (now - this.lastLogMs >= FAILURE_LOG_INTERVAL_MS) {
      this.lastLogMs = now;
      this.log.warn(`${message}${this.failOpen ? ' (fail_open: hook skipped)' : ''}`);
    }
  }

  /** Calls the instance's `close`, if any; never rejects. */
  async close(): Promise<void> {
    try {
      await this.hooks.close?.();
    } catch (e) {
      this.log.warn(`plugin ${this.name}: close failed: ${String(e)}`);
    }
  }
}

type HookFn = (this: PluginHooks, ...args: never[]) => unknown;

/** A hook bound to its instance and to the instance's slot in the chain (its per-request state). */
export class BoundHook {
  readonly inst: PluginInstance;
  readonly slot: number;
  readonly fn: HookFn;
  constructor(inst: PluginInstance, slot: number, fn: HookFn) {
    this.inst = inst;
    this.slot = slot;
    this.fn = fn;
  }
}

/** Hooks of one phase, in chain order. */
export type PhaseHooks = readonly BoundHook[];

const NONE: PhaseHooks = Object.freeze([]);

function hooksOf(instances: readonly PluginInstance[], phase: Phase, from: number): PhaseHooks {
  const name = PHASE_NAMES[phase]!;
  const out: BoundHook[] = [];
  for (let i = from; i < instances.length; i++) {
    const inst = instances[i]!;
    // Hooks are called with their hooks object as `this` (BoundHook keeps both).
    const fn = (inst.hooks as Record<string, unknown>)[name] as HookFn | undefined;
    if (typeof fn === 'function') out.push(new BoundHook(inst, i, fn));
  }
  return out.length === 0 ? NONE : out;
}

/** What one route runs on one listener. */
export class PluginChain {
  /** Listener name (`PluginRequest.listener`). */
  readonly listener: string;
  /** Instances in order: the listener's, then the route's; the index is the state slot. */
  readonly instances: readonly PluginInstance[];
  /** onRequest of the route's own instances (the listener's ran before routing). */
  readonly onRequest: PhaseHooks;
  readonly onRoute: PhaseHooks;
  readonly onUpstreamRequest: PhaseHooks;
  readonly onResponseHead: PhaseHooks;
  readonly onResponseChunk: PhaseHooks;
  readonly onDone: PhaseHooks;

  constructor(listener: string, instances: readonly PluginInstance[], listenerCount: number) {
    this.listener = listener;
    this.instances = instances;
    this.onRequest = hooksOf(instances, Phase.request, listenerCount);
    this.onRoute = hooksOf(instances, Phase.route, 0);
    this.onUpstreamRequest = hooksOf(instances, Phase.upstreamRequest, 0);
    this.onResponseHead = hooksOf(instances, Phase.responseHead, 0);
    this.onResponseChunk = hooksOf(instances, Phase.responseChunk, 0);
    this.onDone = hooksOf(instances, Phase.done, 0);
  }
}

/** The onRequest hooks a listener runs before routing. */
export class PreRouteHooks {
  readonly listener: string;
  readonly hooks: PhaseHooks;
  /**
   * The listener instances' onDone: what runs for a request that ends before a route's chain
   * took over (no route matched, a listener plugin answered or failed).
   */
  readonly done: PhaseHooks;
  /** Number of listener instances (the state slots they use). */
  readonly slots: number;
  constructor(listener: string, instances: readonly PluginInstance[]) {
    this.listener = listener;
    this.hooks = hooksOf(instances, Phase.request, 0);
    this.done = hooksOf(instances, Phase.done, 0);
    this.slots = instances.length;
  }
}

/**
 * Per listener (by index), the pre-route hooks, or null when no listener has any (one null check
 * per request when plugins are unused).
 */
export function compilePreRoute(
  listeners: readonly { name: string; plugins?: readonly string[] }[],
  byName: ReadonlyMap<string, PluginInstance>,
): readonly (PreRouteHooks | null)[] | null {
  let any = false;
  const out = listeners.map((l) => {
    const p = new PreRouteHooks(l.name, resolve(l.plugins ?? [], byName));
    if (p.hooks.length === 0 && p.done.length === 0) return null;
    any = true;
    return p;
  });
  return any ? out : null;
}

/**
 * The chains of one route, by listener index, or null when neither the route nor any listener uses
 * a plugin. An instance both a listener and the route name runs once, in the listener's place.
 */
export function compileRouteChains(
  listeners: readonly { name: string; plugins?: readonly string[] }[],
  routePlugins: readonly string[] | undefined,
  byName: ReadonlyMap<string, PluginInstance>,
): readonly (PluginChain | null)[] | null {
  let any = false;
  const own = routePlugins ?? [];
  const out = listeners.map((l) => {
    const first = resolve(l.plugins ?? [], byName);
    const rest = resolve(own, byName).filter((i) => !first.includes(i));
    if (first.length + rest.length === 0) return null;
    any = true;
    return new PluginChain(l.name, [...first, ...rest], first.length);
  });
  return any ? out : null;
}

function resolve(names: readonly string[], byName: ReadonlyMap<string, PluginInstance>): PluginInstance[] {
  return names.map((n) => {
    const i = byName.get(n);
    // The loader's semantic checks guarantee every name is declared.
    if (i === undefined) throw new Error(`unknown plugin instance ${n}`);
    return i;
  });
}
