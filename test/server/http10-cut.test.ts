/**
 * An HTTP/1.0 client's answer of unknown length ends with the connection (RFC 9112 §6.3), so a
 * plain close would make an answer the node broke off look complete: Sluice resets the connection
 * instead. On the own engine (the uWS engine refuses HTTP/1.0: docs/security.md), against a
 * scripted node that dies in the middle of a chunked JSON body; over TLS, where there is no TCP
 * reset to send, the connection closes without the TLS close_notify and nothing breaks.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as tlsConnect } from 'node:tls';
import { makeSelfSigned } from '../../loadtest/env/self-signed.js';
import { ENGINES, withListenerKeys } from '../helpers/engines.js';
import { basicConfig, startTestSluice, type TestSluice } from '../helpers/sluice.js';

/** How an HTTP/1.0 exchange ended: the bytes received and whether the connection was reset. */
async function http10(url: string, path: string): Promise<{ text: string; reset: boolean }> {
  const u = new URL(url);
  const socket = connect({ host: u.hostname, port: Number(u.port) });
  const chunks: Buffer[] = [];
  socket.on('data', (d: Buffer) => chunks.push(d));
  socket.write(`GET ${path} HTTP/1.0\r\nHost: a\r\n\r\n`);
  const reset = await new Promise<boolean>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the connection stayed open')), 5000);
    socket.once('error', (e: NodeJS.ErrnoException) => {
      clearTimeout(timer);
      resolve(e.code === 'ECONNRESET');
    });
    socket.once('end', () => {
      clearTimeout(timer);
      resolve(false);
    });
  });
  socket.destroy();
  return { text: Buffer.concat(chunks).toString('latin1'), reset };
}

describe('an HTTP/1.0 answer the node breaks off', { timeout: 60_000 }, () => {
  let node: Server | null = null;
  let nodeUrl = '';
  const sockets = new Set<Socket>();

  before(async () => {
    node = createServer((s) => {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.once('data', (d: Buffer) => {
        const whole = d.toString('latin1').startsWith('GET /whole');
        s.write('HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n');
        s.write('10\r\n{"id":"x","obj":\r\n');
        if (whole) s.write('3\r\n"a"\r\n1\r\n}\r\n0\r\n\r\n');
        // Broken off: the rest of the body never comes.
        else setTimeout(() => s.destroy(), 50);
      });
    });
    await new Promise<void>((r) => node!.listen(0, '127.0.0.1', r));
    const addr = node.address();
    nodeUrl = `http://127.0.0.1:${typeof addr === 'object' && addr !== null ? addr.port : 0}`;
  });

  after(async () => {
    for (const s of sockets) s.destroy();
    await new Promise<void>((r) => (node === null ? r() : node.close(() => r())));
  });

  for (const engine of ENGINES.filter((e) => e.name === 'net')) {
    describe(`${engine.name} listener`, () => {
      let t: TestSluice | null = null;
      before(async () => {
        t = await startTestSluice(
          withListenerKeys(basicConfig([nodeUrl]), { pipelining: engine.pipelining }),
        );
      });
      after(async () => {
        await t?.close();
      });

      it('resets the connection instead of closing it as if the answer were complete', async () => {
        const r = await http10(t!.url, '/broken');
        assert.match(r.text, /^HTTP\/1\.[01] 200/);
        assert.equal(r.reset, true, `a clean close after ${JSON.stringify(r.text.slice(-40))}`);
      });

      it('ends a whole answer with a plain close', async () => {
        const r = await http10(t!.url, '/whole');
        assert.equal(r.reset, false);
        assert.ok(r.text.endsWith('{"id":"x","obj":"a"}'), JSON.stringify(r.text.slice(-40)));
      });
    });
  }

  it('over TLS (own engine): closes the connection without failing, and holds no request', async () => {
    const certs = await mkdtemp(join(tmpdir(), 'sluice-http10-'));
    let t: TestSluice | null = null;
    try {
      const cert = await makeSelfSigned(certs, 'http10');
      t = await startTestSluice(
        withListenerKeys(basicConfig([nodeUrl]), { pipelining: 16 }).replace(
          '    port: 0\n',
          `    port: 0\n    tls: { cert_file: ${cert.certFile}, key_file: ${cert.keyFile} }\n`,
        ),
      );
      const u = new URL(t.url);
      const s = tlsConnect({ host: u.hostname, port: Number(u.port), rejectUnauthorized: false });
      const chunks: Buffer[] = [];
      s.on('data', (d: Buffer) => chunks.push(d));
      s.write('GET /broken HTTP/1.0\r\nHost: a\r\n\r\n');
      const closed = await new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), 5000);
        s.once('close', () => {
          clearTimeout(timer);
          resolve(true);
        });
        s.on('error', () => undefined);
      });
      s.destroy();
      assert.equal(closed, true, 'the connection stayed open');
      assert.match(Buffer.concat(chunks).toString('latin1'), /^HTTP\/1\.[01] 200/);
      assert.equal(t.sluice.stats.inFlight, 0);
    } finally {
      await t?.close();
      await rm(certs, { recursive: true, force: true });
    }
  });
});
