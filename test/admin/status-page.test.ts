/**
 * The status page in a real browser (headless Chromium through playwright-core): it loads from the
 * admin listener, lists the nodes with their state, and its plots move while load runs. Skipped
 * loudly without `chromium` on PATH unless SLUICE_TEST_REQUIRE_CHROMIUM=1 (set by `.ci/run`).
 * With SLUICE_STATUS_SCREENSHOT=FILE it also saves a screenshot there (docs/status-page.png).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { basicConfig, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';
import { toolSkip } from '../helpers/tools.js';

const FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
const KEY = 'sk-status-page-test';

/** Sends chat requests (some streamed) from `workers` loops until `stop()`; bounded by `maxMs`. */
function load(url: string, workers: number, maxMs: number): { stop(): Promise<number> } {
  const deadline = Date.now() + maxMs;
  let running = true;
  let sent = 0;
  const loop = async (w: number): Promise<void> => {
    while (running && Date.now() < deadline) {
      const stream = (sent + w) % 2 === 0;
      const r = await fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
        body: JSON.stringify({
          model: 'm',
          messages: [{ role: 'user', content: 'hello' }],
          max_tokens: 8,
          stream,
        }),
      });
      await r.arrayBuffer();
      sent++;
    }
  };
  const loops = Array.from({ length: workers }, (_, w) => loop(w));
  return {
    async stop() {
      running = false;
      await Promise.all(loops);
      return sent;
    },
  };
}

interface PlotState {
  points: number;
  last: string;
  image: string;
}

/** The text of every element matching `selector`. */
function texts(page: Page, selector: string): Promise<string[]> {
  return page.evaluate<string[]>(
    `[...document.querySelectorAll(${JSON.stringify(selector)})].map((e) => e.textContent)`,
  );
}

async function plotState(page: Page, id: string): Promise<PlotState> {
  // A string, evaluated in the page: the test's TypeScript has no DOM types.
  return page.evaluate<PlotState>(
    `(() => { const c = document.getElementById(${JSON.stringify(id)}); return { points: Number(c.dataset.points), last: c.dataset.last || '', image: c.toDataURL() }; })()`,
  );
}

describe(
  'status page',
  {
    timeout: 90_000,
    skip: toolSkip('chromium', 'SLUICE_TEST_REQUIRE_CHROMIUM', 'install it (`apt-get install -y chromium`)'),
  },
  () => {
    let fleet: SimFleet | undefined;
    let t: TestSluice | undefined;
    let context: BrowserContext | undefined;
    let profile = '';

    before(async () => {
      process.env['SLUICE_TEST_STATUS_KEY'] = KEY;
      fleet = await startSimFleet({ nodes: 3, port: 0, profile: 'fast' });
      t = await startTestSluice(
        basicConfig(
          fleet.urls,
          `tenants:
  - name: research
    keys: [{ env: SLUICE_TEST_STATUS_KEY }]
    limits: { requests_per_minute: 100000, tokens_per_minute: 5000000 }
`,
        ),
      );
      profile = await mkdtemp(join(tmpdir(), 'sluice-chromium-'));
      context = await chromium.launchPersistentContext(profile, {
        executablePath: '/usr/bin/chromium',
        headless: true,
        chromiumSandbox: false,
        args: FLAGS,
        viewport: { width: 1280, height: 900 },
      });
    });

    after(async () => {
      await context?.close();
      await t?.close();
      await fleet?.close();
      if (profile !== '') await rm(profile, { recursive: true, force: true });
    });

    it('loads, lists the nodes, and its plots move while load runs', async () => {
      const page = await context!.newPage();
      const errors: string[] = [];
      page.on('pageerror', (e) => errors.push(e.message));
      const res = await page.goto(`${t!.adminUrl}/?interval=250`);
      assert.equal(res?.status(), 200);
      assert.equal(await page.title(), 'Sluice status');
      await page.waitForFunction(
        `document.querySelectorAll('#nodes tbody tr').length === ${fleet!.urls.length}`,
      );
      const listed = await texts(page, '#nodes .node-id');
      assert.deepEqual(listed, fleet!.urls);
      const before = await plotState(page, 'plot-latency');
      const traffic = load(t!.url, 4, 20_000);
      try {
        let moved = false;
        await waitFor(
          async () => {
            const now = await plotState(page, 'plot-latency');
            const ttft = await plotState(page, 'plot-ttft');
            const p50 = Number(now.last.split(',')[0]);
            moved =
              now.points > before.points &&
              p50 > 0 &&
              now.image !== before.image &&
              Number(ttft.last.split(',')[0]) > 0;
            return moved;
          },
          15_000,
          'the latency and TTFT plots to show load',
        );
        const a = await plotState(page, 'plot-latency');
        await waitFor(
          async () => (await plotState(page, 'plot-latency')).points > a.points,
          5_000,
          'another point',
        );
        const b = await plotState(page, 'plot-latency');
        assert.notEqual(b.image, a.image, 'the plot is redrawn as points arrive');
      } finally {
        const sent = await traffic.stop();
        assert.ok(sent > 0);
      }
      const routes = await texts(page, '#routes tbody tr td:first-child');
      assert.deepEqual(routes, ['all']);
      const tenants = await texts(page, '#tenants tbody tr td:first-child');
      assert.deepEqual(tenants, ['research']);
      const shot = process.env['SLUICE_STATUS_SCREENSHOT'];
      if (shot !== undefined && shot !== '') await page.screenshot({ path: shot, fullPage: true });
      assert.deepEqual(errors, []);
    });
  },
);
