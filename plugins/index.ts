/**
 * The first-party plugins by name, for `use:` in a config. Each is imported only when a config
 * uses it. They are written against `api.ts` exactly as a third-party plugin would be.
 */
import type { PluginDefinition } from './api.js';

/** Loads a first-party plugin's definition. */
export type BuiltinLoader = () => Promise<PluginDefinition<never>>;

/** First-party plugins by `use:` name. */
export const BUILTIN_PLUGINS: Readonly<Record<string, BuiltinLoader>> = {
  'model-alias': async () => (await import('./model-alias/model-alias.js')).default,
  'header-rules': async () => (await import('./header-rules/header-rules.js')).default,
  'response-cache': async () => (await import('./response-cache/response-cache.js')).default,
  'auth-jwt': async () => (await import('./auth-jwt/auth-jwt.js')).default,
  'audit-log': async () => (await import('./audit-log/audit-log.js')).default,
  'request-limits': async () => (await import('./request-limits/request-limits.js')).default,
};
