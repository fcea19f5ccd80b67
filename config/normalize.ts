/**
 * The last step of loading: rewrites a valid config into its canonical spelling, so that equal
 * configs compare equal and later stages need not repeat case or URL rules. Runs only on data that
 * passed the schema and the semantic checks.
 */
import type { SluiceConfig } from './types.js';

/**
 * Normalises `config` in place and returns it: node URLs become their origin
 * (`http://Node-1:8000/` → `http://node-1:8000`), route hosts are lower-cased (hosts compare
 * case-insensitively, RFC 9110 §4.2.3), and the file's optional `version` key is dropped.
 */
export function normalizeConfig(config: SluiceConfig & { version?: number }): SluiceConfig {
  delete config.version;
  for (const pool of config.pools) {
    for (const node of pool.nodes) node.url = new URL(node.url).origin;
  }
  for (const route of config.routes) {
    if (route.match.host !== undefined) route.match.host = route.match.host.toLowerCase();
  }
  return config;
}
