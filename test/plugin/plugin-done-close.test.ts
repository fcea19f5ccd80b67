/**
 * A plugin instance retired by a reload is closed only after the onDone hooks of its last requests
 * settled (an async onDone ran on after close before). A real Sluice, a real node behind it.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { startRecordingNode, type RecordingNode } from '../helpers/scripted-node.js';
import { chatRequest, LOOPBACK_HEAD, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';

const SLOW_DONE = fileURLToPath(new URL('./fixtures/slow-done-plugin.js', import.meta.url));

function config(node: string, label: string): string {
  return `${LOOPBACK_HEAD}plugins:
  - name: slow
    use: ${SLOW_DONE}
    options: { label: ${label}, done_ms: 400 }
pools:
  - { name: gpu, nodes: [{ url: ${node} }] }
routes:
  - name: all
    match: {}
    pool: gpu
    plugins: [slow]
`;
}

function events(): string[] {
  return (globalThis as { __slowDoneEvents?: string[] }).__slowDoneEvents ?? [];
}

describe('plugin instances retired by a reload', { timeout: 30_000 }, () => {
  let node: RecordingNode | null = null;
  let t: TestSluice | null = null;

  before(async () => {
    node = await startRecordingNode(200, '{"choices":[]}');
    t = await startTestSluice(config(node.url, 'old'));
  });

  after(async () => {
    await t?.close();
    await node?.close();
  });

  it('close after the pending onDone of their last request', async () => {
    const r = await fetch(`${t!.url}/v1/chat/completions`, chatRequest());
    assert.equal(r.status, 200);
    await r.text();
    // The answer is out; its onDone runs on for 400 ms. The reload retires the old instance now.
    await writeFile(t!.configPath, config(node!.url, 'new'));
    const reload = (await (await fetch(`${t!.adminUrl}/admin/reload`, { method: 'POST' })).json()) as {
      result: string;
    };
    assert.equal(reload.result, 'applied');
    await waitFor(() => events().includes('close:old'), 5_000, 'the old instance closed');
    assert.deepEqual(
      events().filter((e) => e.endsWith(':old')),
      ['done:old', 'close:old'],
      'the instance closed before its request’s onDone finished',
    );
  });

  it('close when the client left while an async hook held its answer', async () => {
    const late = (label: string): string => `${LOOPBACK_HEAD}plugins:
  - name: late
    use: ${SLOW_DONE}
    options: { label: ${label}, done_ms: 0, late_answer_ms: 400 }
pools:
  - { name: gpu, nodes: [{ url: ${node!.url} }] }
routes:
  - name: all
    match: {}
    pool: gpu
    plugins: [late]
`;
    await writeFile(t!.configPath, late('first'));
    const applied = async (): Promise<string> =>
      ((await (await fetch(`${t!.adminUrl}/admin/reload`, { method: 'POST' })).json()) as { result: string })
        .result;
    assert.equal(await applied(), 'applied');
    const ac = new AbortController();
    const pending = fetch(`${t!.url}/v1/chat/completions`, { ...chatRequest(), signal: ac.signal });
    setTimeout(() => ac.abort(), 100);
    await assert.rejects(pending);
    await waitFor(() => events().includes('done:first'), 5_000, 'the request finished');
    await writeFile(t!.configPath, late('second'));
    assert.equal(await applied(), 'applied');
    // The retired plan is disposed once its last request is done: its instance closes.
    await waitFor(() => events().includes('close:first'), 3_000, 'the first instance closed');
  });
});
