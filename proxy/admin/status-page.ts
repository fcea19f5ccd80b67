/**
 * The status page served at the admin listener's `/`: one static HTML file
 * (`proxy/admin/status-page.html`, no build step, no external assets) read once at first use. It
 * polls `/admin/stats` and `/admin/nodes` from the browser.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { findSluiceRoot } from '../../config/sluice-root.js';

let html: string | null = null;

/** The page's HTML. */
export function statusPageHtml(): string {
  html ??= readFileSync(join(findSluiceRoot(), 'proxy', 'admin', 'status-page.html'), 'utf8');
  return html;
}
