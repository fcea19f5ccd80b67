/** The Sluice version, read once from the package.json beside the install (startup only). */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { findSluiceRoot } from '../../config/sluice-root.js';

let cached: string | null = null;

/** The `version` of Sluice's package.json. */
export function sluiceVersion(): string {
  if (cached === null) {
    const pkg = JSON.parse(readFileSync(join(findSluiceRoot(), 'package.json'), 'utf8')) as {
      version: string;
    };
    cached = pkg.version;
  }
  return cached;
}
