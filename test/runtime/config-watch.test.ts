/**
 * The config file watch as real tools change files: an editor's save through a temporary file and
 * a rename, a save that moves the old file away first, a Kubernetes ConfigMap update (the `..data`
 * symlink swapped to a new timestamped directory), an edit of a symlink's target in another
 * directory. Each causes exactly one reload; a file caught half-written is never applied.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdir, mkdtemp, open, rename, rm, symlink, unlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { BrokenNode } from '../../loadtest/chaos/broken-node.js';
import { LOOPBACK_HEAD, memoryLogger, waitFor } from '../helpers/sluice.js';
import { startSluice, type Sluice } from '../../proxy/runtime/sluice.js';

const DEBOUNCE_MS = 100;

/** A valid config whose only pool has the given nodes; its routes come first, the node list last. */
function config(nodes: readonly string[]): string {
  return `${LOOPBACK_HEAD}server:
  reload_debounce_ms: ${DEBOUNCE_MS}
routes:
  - name: all
    match: {}
    pool: gpu
pools:
  - name: gpu
    nodes:
${nodes.map((u) => `      - url: ${u}`).join('\n')}
`;
}

function applied(s: Sluice): number {
  return s.stats.reloads.get('applied') ?? 0;
}

function nodeCount(s: Sluice): number {
  return s.current.config.pools[0]!.nodes.length;
}

/** Waits for a reload to apply, then long enough for a second one to show if there were one. */
async function oneReload(s: Sluice, before: number): Promise<void> {
  await waitFor(() => applied(s) > before, 5000, 'the reload');
  const quiet = performance.now() + 6 * DEBOUNCE_MS;
  await waitFor(() => performance.now() > quiet, 5000, 'a quiet period');
  assert.equal(applied(s), before + 1, 'exactly one reload');
  assert.equal(s.stats.reloads.get('rejected') ?? 0, 0, 'no rejected reload on the way');
}

describe('config file watch', { timeout: 60_000 }, () => {
  let nodeA: BrokenNode | null = null;
  let nodeB: BrokenNode | null = null;
  let dir = '';

  before(async () => {
    nodeA = await BrokenNode.start();
    nodeB = await BrokenNode.start();
    dir = await mkdtemp(join(tmpdir(), 'sluice-watch-'));
  });

  after(async () => {
    await nodeA?.close();
    await nodeB?.close();
    if (dir !== '') await rm(dir, { recursive: true, force: true });
  });

  async function start(path: string): Promise<Sluice> {
    return startSluice({ configPath: path, watch: true, logger: memoryLogger([]) });
  }

  it('reloads once for an editor save through a temporary file and a rename', async () => {
    const d = await mkdtemp(join(dir, 'editor-'));
    const file = join(d, 'sluice.yaml');
    await writeFile(file, config([nodeA!.url]));
    const s = await start(file);
    try {
      await writeFile(join(d, '.sluice.yaml.swp'), 'scratch');
      await writeFile(join(d, 'sluice.yaml.tmp'), config([nodeA!.url, nodeB!.url]));
      await rename(join(d, 'sluice.yaml.tmp'), file);
      await unlink(join(d, '.sluice.yaml.swp'));
      await oneReload(s, 0);
      assert.equal(nodeCount(s), 2);
    } finally {
      await s.close();
    }
  });

  it('reloads once for a save that moves the old file away before writing the new one', async () => {
    const d = await mkdtemp(join(dir, 'backup-'));
    const file = join(d, 'sluice.yaml');
    await writeFile(file, config([nodeA!.url]));
    const s = await start(file);
    try {
      await rename(file, `${file}~`);
      await writeFile(file, config([nodeB!.url]));
      await unlink(`${file}~`);
      await oneReload(s, 0);
      assert.equal(s.current.config.pools[0]!.nodes[0]!.url, nodeB!.url);
    } finally {
      await s.close();
    }
  });

  it('reloads once for a Kubernetes ConfigMap update (the ..data symlink swapped to a new directory)', async () => {
    const d = await mkdtemp(join(dir, 'configmap-'));
    await mkdir(join(d, '..2024_01_01_00_00_00.1'));
    await writeFile(join(d, '..2024_01_01_00_00_00.1', 'sluice.yaml'), config([nodeA!.url]));
    await symlink('..2024_01_01_00_00_00.1', join(d, '..data'));
    await symlink('..data/sluice.yaml', join(d, 'sluice.yaml'));
    const s = await start(join(d, 'sluice.yaml'));
    try {
      // What the kubelet's atomic writer does: a new timestamped directory, a temporary symlink to
      // it renamed over ..data, then the old directory removed.
      await mkdir(join(d, '..2024_01_01_00_01_00.2'));
      await writeFile(join(d, '..2024_01_01_00_01_00.2', 'sluice.yaml'), config([nodeA!.url, nodeB!.url]));
      await symlink('..2024_01_01_00_01_00.2', join(d, '..data_tmp'));
      await rename(join(d, '..data_tmp'), join(d, '..data'));
      await rm(join(d, '..2024_01_01_00_00_00.1'), { recursive: true });
      await oneReload(s, 0);
      assert.equal(nodeCount(s), 2);
      // And the next update is seen too (the watch followed the swap).
      await mkdir(join(d, '..2024_01_01_00_02_00.3'));
      await writeFile(join(d, '..2024_01_01_00_02_00.3', 'sluice.yaml'), config([nodeB!.url]));
      await symlink('..2024_01_01_00_02_00.3', join(d, '..data_tmp'));
      await rename(join(d, '..data_tmp'), join(d, '..data'));
      await rm(join(d, '..2024_01_01_00_01_00.2'), { recursive: true });
      await oneReload(s, 1);
      assert.equal(nodeCount(s), 1);
    } finally {
      await s.close();
    }
  });

  it("reloads when a symlinked config's target is edited in its own directory", async () => {
    const d = await mkdtemp(join(dir, 'link-'));
    const target = await mkdtemp(join(dir, 'target-'));
    await writeFile(join(target, 'real.yaml'), config([nodeA!.url]));
    await symlink(join(target, 'real.yaml'), join(d, 'sluice.yaml'));
    const s = await start(join(d, 'sluice.yaml'));
    try {
      await writeFile(join(target, 'real.yaml.new'), config([nodeA!.url, nodeB!.url]));
      await rename(join(target, 'real.yaml.new'), join(target, 'real.yaml'));
      await oneReload(s, 0);
      assert.equal(nodeCount(s), 2);
    } finally {
      await s.close();
    }
  });

  it('never applies a file caught half-written, even when the first half alone is a valid config', async () => {
    const d = await mkdtemp(join(dir, 'half-'));
    const file = join(d, 'sluice.yaml');
    await writeFile(file, config([nodeA!.url]));
    const s = await start(file);
    const versions: number[] = [];
    const seen = setInterval(() => {
      if (versions.at(-1) !== s.current.version) versions.push(s.current.version, nodeCount(s));
    }, 5);
    try {
      const full = config([nodeA!.url, nodeB!.url]);
      const cut = full.lastIndexOf('      - url:');
      // The first part is a complete, valid config with one node. The writer pauses longer than
      // the debounce between the two writes, so the watch fires while the file is half-written.
      const fh = await open(file, 'w');
      await fh.write(full.slice(0, cut));
      const resume = performance.now() + DEBOUNCE_MS * 1.5;
      await waitFor(() => performance.now() > resume, 5000, 'the pause of the writer');
      await fh.write(full.slice(cut));
      await fh.close();
      await oneReload(s, 0);
      clearInterval(seen);
      assert.deepEqual(versions, [1, 1, 2, 2], 'only the complete file (two nodes) was applied');
    } finally {
      clearInterval(seen);
      await s.close();
    }
  });
});
