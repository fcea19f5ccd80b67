/**
 * ajv, loaded on first use: its code takes about 8 MiB in every thread that loads it, and a
 * process whose config names no plugin with an options schema, built with the schema's generated
 * validator (`schema-validator.ts`), never needs it.
 */
import { createRequire } from 'node:module';
import type { Ajv, Options } from 'ajv';

let ajvClass: (new (options: Options) => Ajv) | null = null;

/** A new ajv instance with `options`; the first call loads ajv (synchronously: startup and reload only). */
export function newAjv(options: Options): Ajv {
  ajvClass ??= (createRequire(import.meta.url)('ajv') as { Ajv: new (options: Options) => Ajv }).Ajv;
  return new ajvClass(options);
}
