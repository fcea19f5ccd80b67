/**
 * The forwarding headers a node receives, on both engines: by default the client's
 * X-Forwarded-Host, X-Forwarded-Proto and Forwarded are dropped and Sluice writes its own, so a
 * client cannot make up the host or scheme; a listener with `trust_forwarded` (behind a load
 * balancer that terminates TLS) passes them on. X-Forwarded-For is appended to either way.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import type { IncomingHttpHeaders } from 'node:http';
import { ENGINES, withListenerKeys } from '../helpers/engines.js';
import { startScriptedNode, type ScriptedNode } from '../helpers/scripted-node.js';
import { basicConfig, chatRequest, startTestSluice, type TestSluice } from '../helpers/sluice.js';

const CLIENT = {
  'x-forwarded-host': 'evil.example',
  'x-forwarded-proto': 'https',
  forwarded: 'for=9.9.9.9;proto=https',
  'x-forwarded-for': '1.2.3.4',
};

describe('forwarding headers', { timeout: 30_000 }, () => {
  let node: ScriptedNode | undefined;
  const seen: IncomingHttpHeaders[] = [];
  const started: TestSluice[] = [];

  before(async () => {
    node = await startScriptedNode((req, res) => {
      req.resume();
      req.on('end', () => {
        seen.push(req.headers);
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{}');
      });
    });
  });

  after(async () => {
    for (const t of started) await t.close();
    await node?.close();
  });

  for (const engine of ENGINES) {
    for (const trust of [false, true]) {
      it(`${engine.name} listener${trust ? ' with trust_forwarded' : ''}: ${trust ? 'passes on' : 'replaces'} the client's`, async () => {
        const t = await startTestSluice(
          withListenerKeys(basicConfig([node!.url]), { pipelining: engine.pipelining }).replace(
            '    port: 0\n',
            `    port: 0\n    trust_forwarded: ${trust}\n`,
          ),
        );
        started.push(t);
        const r = await fetch(`${t.url}/v1/chat/completions`, chatRequest({}, CLIENT));
        assert.equal(r.status, 200);
        await r.text();
        const h = seen.at(-1)!;
        const host = new URL(t.url).host;
        assert.equal(h['x-forwarded-for'], '1.2.3.4, 127.0.0.1');
        if (trust) {
          assert.equal(h['x-forwarded-host'], 'evil.example');
          assert.equal(h['x-forwarded-proto'], 'https');
          assert.equal(h['forwarded'], 'for=9.9.9.9;proto=https');
        } else {
          assert.equal(h['x-forwarded-host'], host);
          assert.equal(h['x-forwarded-proto'], 'http');
          assert.equal(h['forwarded'], undefined);
        }
      });
    }
  }
});
