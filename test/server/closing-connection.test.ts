/**
 * Sluice's own engine (`pipelining` > 0) after `Connection: close`: no further request is read,
 * and what the client keeps sending while the answer is computed is dropped as it arrives, never
 * kept (a client flooding such a connection used to grow a buffer copied whole at every read).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import type { ServerResponse } from 'node:http';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { basicConfig, startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';
import { startScriptedNode, type ScriptedNode } from '../helpers/scripted-node.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Bytes held in ArrayBuffers (Buffers) after a full collection. */
function heldBufferBytes(): number {
  gc();
  gc();
  return process.memoryUsage().arrayBuffers;
}

describe('a connection closing after its request', { timeout: 30_000 }, () => {
  let node: ScriptedNode | undefined;
  const held: ServerResponse[] = [];
  let t: TestSluice | undefined;

  before(async () => {
    node = await startScriptedNode((req, res) => {
      req.resume();
      req.on('end', () => held.push(res));
    });
    t = await startTestSluice(
      basicConfig([node.url]).replace('    port: 0\n', '    port: 0\n    pipelining: 4\n'),
    );
  });

  after(async () => {
    for (const res of held.splice(0)) res.destroy();
    await t?.close();
    await node?.close();
  });

  it('drops what the client sends after it while the answer is computed', async () => {
    const port = Number(new URL(t!.url).port);
    const s = connect(port, '127.0.0.1');
    let answer = '';
    s.setEncoding('latin1');
    s.on('data', (c: string) => (answer += c));
    const closed = new Promise<void>((resolve) => s.on('close', () => resolve()));
    s.on('error', () => {});
    await new Promise<void>((resolve) => s.once('connect', () => resolve()));
    s.write(
      'POST /v1/chat/completions HTTP/1.1\r\nHost: sluice.test\r\nConnection: close\r\n' +
        'Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}',
    );
    await waitFor(() => held.length === 1, 5000, 'the request at the node');
    const before = heldBufferBytes();
    // 16 MiB that are not a request, sent while the answer is pending.
    const junk = Buffer.alloc(64 * 1024, 'A');
    for (let i = 0; i < 256; i++) {
      if (!s.write(junk)) await new Promise<void>((resolve) => s.once('drain', () => resolve()));
    }
    await new Promise<void>((resolve) => s.write('', () => resolve()));
    // What the kernel still buffers is read within moments.
    await new Promise((r) => setTimeout(r, 300));
    // Sluice read it all (the writes completed); it must not be holding it.
    const grew = heldBufferBytes() - before;
    assert.ok(grew < 4 * 1024 * 1024, `${(grew / 1048576).toFixed(1)} MiB more held in buffers`);
    const res = held.shift()!;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"ok":true}');
    await closed;
    assert.match(answer, /^HTTP\/1\.1 200 /);
    assert.match(answer, /\r\n\{"ok":true\}\r\n0\r\n\r\n$/);
  });
});
