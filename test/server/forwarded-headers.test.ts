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
import { RawConnection } from '../helpers/raw-http.js';
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
    it(`${engine.name} listener: sends no X-Forwarded-Host for a request that names no host`, async () => {
      const t = await startTestSluice(
        withListenerKeys(basicConfig([node!.url]), { pipelining: engine.pipelining }),
      );
      started.push(t);
      // An empty Host is allowed (RFC 9112 §3.2); HTTP/1.0 needs none (the uWS engine refuses 1.0).
      // A Host of only a port separator (`:`, `:80`) names none either.
      const heads = [
        'GET /v1/models HTTP/1.1\r\nHost:\r\n\r\n',
        'GET /v1/models HTTP/1.1\r\nHost: :\r\n\r\n',
        'GET /v1/models HTTP/1.1\r\nHost: :80\r\n\r\n',
      ];
      if (engine.name === 'net') heads.push('GET /v1/models HTTP/1.0\r\n\r\n');
      for (const bytes of heads) {
        const conn = await RawConnection.open(t.url);
        try {
          const before = seen.length;
          await conn.write(bytes);
          const r = await conn.readResponse();
          assert.equal(r.status, 200, r.body.toString());
          assert.equal(seen.length, before + 1);
          const h = seen.at(-1)!;
          assert.equal(
            h['x-forwarded-host'],
            undefined,
            `${JSON.stringify(bytes)}: an empty X-Forwarded-Host`,
          );
          assert.equal(h['x-forwarded-for'], '127.0.0.1');
          assert.equal(h['x-forwarded-proto'], 'http');
        } finally {
          conn.destroy();
        }
      }
    });
  }
});

describe('two API keys in one request', { timeout: 30_000 }, () => {
  let node: ScriptedNode | undefined;
  let received = 0;
  const started: TestSluice[] = [];

  before(async () => {
    node = await startScriptedNode((req, res) => {
      received++;
      req.resume();
      req.on('end', () => res.end('{}'));
    });
  });

  after(async () => {
    for (const t of started) await t.close();
    await node?.close();
  });

  for (const engine of ENGINES) {
    it(`${engine.name} listener: are refused with 400 and reach no node, one key sent twice is served`, async () => {
      const t = await startTestSluice(
        withListenerKeys(basicConfig([node!.url]), { pipelining: engine.pipelining }),
      );
      started.push(t);
      const before = received;
      const conn = await RawConnection.open(t.url);
      try {
        await conn.write(
          'GET /v1/models HTTP/1.1\r\nHost: sluice.test\r\nAuthorization: Bearer sk-a\r\n' +
            'Authorization: Bearer sk-b\r\n\r\n',
        );
        const r = await conn.readResponse();
        assert.equal(r.status, 400);
        assert.match(r.body.toString(), /more than one Authorization header/);
        for (const [pair, why] of [
          ['x-api-key: sk-a\r\nx-api-key: sk-b', /more than one x-api-key header/],
          ['Authorization: Bearer sk-a\r\nx-api-key: sk-b', /carry different keys/],
        ] as const) {
          const c = await RawConnection.open(t.url);
          try {
            await c.write(`GET /v1/models HTTP/1.1\r\nHost: sluice.test\r\n${pair}\r\n\r\n`);
            const a = await c.readResponse();
            assert.equal(a.status, 400);
            assert.match(a.body.toString(), why);
          } finally {
            c.destroy();
          }
        }
        // The same key twice is no ambiguity.
        const same = await RawConnection.open(t.url);
        try {
          await same.write(
            'GET /v1/models HTTP/1.1\r\nHost: sluice.test\r\nAuthorization: Bearer sk-a\r\nx-api-key: sk-a\r\n\r\n',
          );
          assert.equal((await same.readResponse()).status, 200);
        } finally {
          same.destroy();
        }
        assert.equal(received - before, 1);
      } finally {
        conn.destroy();
      }
    });
  }
});
