/**
 * What plugins share across reloads: the metrics registry and the key-value store backend. Creates
 * each plan's plugin instances (calling `create` with a context) and closes the backend at
 * shutdown. Startup and reload only.
 */
import { dirname, resolve } from 'node:path';
import type { PluginContext, PluginLogger } from '../../plugins/api.js';
import type { PluginStoreConfig } from '../../config/types.js';
import { nowMs } from '../lifecycle/clock.js';
import type { Logger } from '../runtime/logger.js';
import { kvView, MemoryKv, RedisKv, type KvBackend } from './kv-store.js';
import { PHASE_NAMES, PluginInstance } from './plugin-chain.js';
import type { LoadedPlugin } from './plugin-loader.js';
import { PluginMetricsRegistry } from './plugin-metrics.js';

const CLOCK = { nowMs, wallMs: Date.now };

function prefixed(log: Logger, name: string): PluginLogger {
  const p = `plugin ${name}: `;
  return {
    debug: (m) => log.debug(p + m),
    info: (m) => log.info(p + m),
    warn: (m) => log.warn(p + m),
    error: (m) => log.error(p + m),
  };
}

export class PluginRuntime {
  readonly metrics = new PluginMetricsRegistry();
  private readonly log: Logger;
  private backend: KvBackend | null = null;

  constructor(log: Logger) {
    this.log = log;
  }

  /** The store backend, created on first use from the config's `plugin_store` (restart-only). */
  store(config: PluginStoreConfig): KvBackend {
    if (this.backend === null) {
      const r = config.redis;
      this.backend =
        config.store === 'redis' && r !== undefined
          ? new RedisKv({
              url: r.url,
              keyPrefix: r.key_prefix,
              timeoutMs: r.timeout_ms,
              connectTimeoutMs: r.connect_timeout_ms,
              reconnectMaxDelayMs: r.reconnect_max_delay_ms,
              logger: this.log,
            })
          : new MemoryKv(config.max_entries);
    }
    return this.backend;
  }

  /**
   * Creates one instance per loaded plugin, by instance name. Rejects, after closing the ones
   * already created, when a plugin's `create` throws, rejects or returns no hooks object.
   */
  async createInstances(
    loaded: readonly LoadedPlugin[],
    store: PluginStoreConfig,
    configPath: string,
  ): Promise<Map<string, PluginInstance>> {
    const out = new Map<string, PluginInstance>();
    const configDir = dirname(resolve(configPath));
    for (const [index, p] of loaded.entries()) {
      const name = p.config.name;
      const context: PluginContext = {
        name,
        configDir,
        log: prefixed(this.log, name),
        metrics: this.metrics.view(),
        clock: CLOCK,
        kv: kvView(this.store(store), name),
      };
      try {
        const hooks = await withTimeout(
          p.definition.create(p.config.options as never, context),
          p.config.create_timeout_ms,
          // An instance made after its config was refused is closed at once.
          (late) => void Promise.resolve(late?.close?.()).catch(() => undefined),
        );
        if (typeof hooks !== 'object' || hooks === null) throw new Error('create returned no hooks object');
        const errors = PHASE_NAMES.map((phase) => this.metrics.errors.at([name, phase]));
        out.set(
          name,
          new PluginInstance(
            name,
            p.definition.name,
            p.definition.version,
            hooks,
            p.config.timeout_ms,
            p.config.fail_open,
            errors,
            this.log,
          ),
        );
      } catch (e) {
        for (const i of out.values()) await i.close();
        throw new Error(
          `plugins[${index}] (${name}, ${p.definition.name}): create failed: ${e instanceof Error ? e.message : String(e)}`,
        );
      }
    }
    return out;
  }

  /** Closes the store backend (shutdown). */
  async close(): Promise<void> {
    const b = this.backend;
    this.backend = null;
    await b?.close();
  }
}

/**
 * `create`'s result, or a rejection once `ms` passed: a create that never settles must not hold a
 * reload (and every reload after it) or the startup forever. The instance it may still make is
 * never used.
 */
function withTimeout<T>(value: T | PromiseLike<T>, ms: number, late: (v: T) => void): Promise<T> {
  let timer: NodeJS.Timeout | null = null;
  let timedOut = false;
  const result = Promise.resolve(value);
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      timedOut = true;
      reject(new Error(`create did not finish within ${ms} ms (create_timeout_ms)`));
    }, ms);
  });
  result.then(
    (v) => {
      if (timedOut) late(v);
    },
    () => undefined,
  );
  return Promise.race([result, timeout]).finally(() => {
    if (timer !== null) clearTimeout(timer);
  });
}
