/**
 * TLS on client listeners, with certificates made at test time: HTTP/1.1 over TLS (and what a
 * client offering ALPN gets), `x-forwarded-proto: https` to the node, a certificate swapped by a
 * reload or a replaced file while open connections keep working, a bad certificate rejected with
 * the old one kept, and a clear error for a missing file at startup.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { copyFile, mkdtemp, rename, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect as netConnect } from 'node:net';
import { connect, type TLSSocket } from 'node:tls';
import { BrokenNode, OK_JSON } from '../../loadtest/chaos/broken-node.js';
import { makeSelfSigned, type SelfSigned } from '../../loadtest/env/self-signed.js';
import { runTlsSwap, tlsSwapProblems } from '../../loadtest/chaos/tls-swap.js';
import { startTestSluice, waitFor, type TestSluice } from '../helpers/sluice.js';
import { ConfigInvalidError } from '../../proxy/runtime/sluice.js';

/** A TLS client connection that sends requests one after another and reads sized answers. */
class TlsClient {
  private buf = Buffer.alloc(0);
  private wake: (() => void) | null = null;
  closed = false;

  private constructor(readonly socket: TLSSocket) {
    socket.on('data', (d: Buffer) => {
      this.buf = Buffer.concat([this.buf, d]);
      this.wake?.();
    });
    socket.on('close', () => {
      this.closed = true;
      this.wake?.();
    });
    socket.on('error', () => undefined);
  }

  static open(port: number, alpn?: string[]): Promise<TlsClient> {
    return new Promise((resolve, reject) => {
      const socket = connect(
        {
          host: '127.0.0.1',
          port,
          rejectUnauthorized: false,
          ...(alpn === undefined ? {} : { ALPNProtocols: alpn }),
        },
        () => resolve(new TlsClient(socket)),
      );
      socket.once('error', reject);
    });
  }

  /** Common name of the certificate the server presented. */
  get commonName(): string {
    return String(this.socket.getPeerCertificate().subject.CN);
  }

  /** Sends a chat request and resolves with the status and body. */
  async chat(): Promise<{ status: number; body: string; requestId: string }> {
    const body = '{"model":"m","messages":[]}';
    this.socket.write(
      `POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`,
    );
    return this.readAnswer();
  }

  /** Reads the next sized answer on the connection. */
  async readAnswer(): Promise<{ status: number; body: string; requestId: string }> {
    const deadline = Date.now() + 5000;
    for (;;) {
      const end = this.buf.indexOf('\r\n\r\n');
      if (end >= 0) {
        const head = this.buf.subarray(0, end).toString('latin1');
        const need = end + 4 + Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
        if (this.buf.length >= need) {
          const answer = this.buf.subarray(end + 4, need).toString();
          this.buf = this.buf.subarray(need);
          const requestId = /\r\nx-request-id: *([^\r]*)/i.exec(head)?.[1] ?? '';
          return { status: Number(head.slice(9, 12)), body: answer, requestId };
        }
      }
      if (this.closed) throw new Error('the connection closed');
      if (Date.now() > deadline) throw new Error('no answer in time');
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        setTimeout(resolve, 100);
      });
    }
  }

  close(): void {
    this.socket.destroy();
  }
}

function tlsConfig(node: string, pipelining = 0, listenerExtra = ''): string {
  return `listeners:
  - name: public
    address: 127.0.0.1
    port: 0
    pipelining: ${pipelining}
    tls: { cert_file: tls.crt, key_file: tls.key }
${listenerExtra}
admin:
  address: 127.0.0.1
  port: 0
server:
  reload_debounce_ms: 50
pools:
  - name: gpu
    nodes:
      - url: ${node}
routes:
  - name: all
    match: {}
    pool: gpu
`;
}

async function metric(t: TestSluice, series: string): Promise<number> {
  const text = await (await fetch(`${t.adminUrl}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(`${series} `));
  return line === undefined ? NaN : Number(line.slice(series.length + 1));
}

/** The two downstream engines: uWS (`pipelining: 0`) and Sluice's own (`pipelining` > 0). */
const ENGINES = [
  { name: 'uWS', pipelining: 0, alpn: false as const },
  { name: 'own engine', pipelining: 16, alpn: 'http/1.1' },
];

describe('TLS listeners', { timeout: 90_000 }, () => {
  let node: BrokenNode | null = null;
  let certs = '';
  let a: SelfSigned;
  let b: SelfSigned;

  before(async () => {
    node = await BrokenNode.start();
    certs = await mkdtemp(join(tmpdir(), 'sluice-certs-'));
    a = await makeSelfSigned(certs, 'a', 'cert-a');
    b = await makeSelfSigned(certs, 'b', 'cert-b');
  });

  after(async () => {
    await node?.close();
    if (certs !== '') await rm(certs, { recursive: true, force: true });
  });

  /** Starts Sluice with cert `c` installed as tls.crt / tls.key beside its config. */
  async function start(
    c: SelfSigned,
    watch = false,
    pipelining = 0,
    listenerExtra = '',
  ): Promise<{ t: TestSluice; port: number; dir: string }> {
    const t = await startTestSluice(tlsConfig(node!.url, pipelining, listenerExtra), {
      watch,
      before: (dir) => install(dir, c),
    });
    const dir = t.configPath.slice(0, t.configPath.lastIndexOf('/'));
    return { t, port: t.sluice.listeners[0]!.port, dir };
  }

  /** Puts `c` in place as tls.crt / tls.key in `dir`, each file replaced by a rename. */
  async function install(dir: string, c: SelfSigned, key: SelfSigned = c): Promise<void> {
    await copyFile(c.certFile, join(dir, 'tls.crt.new'));
    await copyFile(key.keyFile, join(dir, 'tls.key.new'));
    await rename(join(dir, 'tls.key.new'), join(dir, 'tls.key'));
    await rename(join(dir, 'tls.crt.new'), join(dir, 'tls.crt'));
  }

  for (const engine of ENGINES) {
    it(`${engine.name}: serves HTTP/1.1 over TLS and tells the node the client used https`, async () => {
      const { t, port } = await start(a, false, engine.pipelining);
      try {
        // uWS answers no ALPN (a documented deviation): a client offering h2 falls back to HTTP/1.1.
        // The own engine selects http/1.1 by ALPN.
        const c = await TlsClient.open(port, ['h2', 'http/1.1']);
        try {
          assert.equal(c.socket.alpnProtocol, engine.alpn);
          assert.equal(c.commonName, 'cert-a');
          const r = await c.chat();
          assert.equal(r.status, 200);
          assert.equal(r.body, OK_JSON);
          assert.equal(node!.requests.at(-1)!.headers.get('x-forwarded-proto'), 'https');
          assert.equal((await c.chat()).status, 200, 'the connection is kept alive');
        } finally {
          c.close();
        }
      } finally {
        await t.close();
      }
    });

    it(`${engine.name}: swaps the certificate on reload for new connections while open connections keep working`, async () => {
      const { t, port, dir } = await start(a, false, engine.pipelining);
      try {
        const old = await TlsClient.open(port);
        assert.equal((await old.chat()).status, 200);
        await install(dir, b);
        const res = await fetch(`${t.adminUrl}/admin/reload`, { method: 'POST' });
        const body = (await res.json()) as { result: string; certificates: string[] };
        assert.equal(res.status, 200);
        assert.deepEqual([body.result, body.certificates], ['unchanged', ['public']]);
        const fresh = await TlsClient.open(port);
        assert.equal(fresh.commonName, 'cert-b', 'a new connection gets the new certificate');
        assert.equal((await fresh.chat()).status, 200);
        assert.equal((await old.chat()).status, 200, 'the open connection still works');
        assert.equal(old.commonName, 'cert-a');
        assert.equal(await metric(t, 'sluice_tls_certificate_swaps_total{listener="public"}'), 1);
        assert.equal(await metric(t, 'sluice_tls_retired_connections{listener="public"}'), 1);
        old.close();
        await waitFor(
          async () => (await metric(t, 'sluice_tls_retired_connections{listener="public"}')) === 0,
          5000,
          'the old certificate to be dropped',
        );
        fresh.close();
      } finally {
        await t.close();
      }
    });

    it(`${engine.name}: swaps the certificate when its files are replaced (file watch)`, async () => {
      const { t, port, dir } = await start(a, true, engine.pipelining);
      try {
        await install(dir, b);
        await waitFor(
          async () => (await metric(t, 'sluice_tls_certificate_swaps_total{listener="public"}')) === 1,
          5000,
          'the swap',
        );
        const c = await TlsClient.open(port);
        assert.equal(c.commonName, 'cert-b');
        assert.equal((await c.chat()).status, 200);
        c.close();
      } finally {
        await t.close();
      }
    });

    it(`${engine.name}: rejects a reload whose key does not match its certificate and keeps the one it serves`, async () => {
      const { t, port, dir } = await start(a, false, engine.pipelining);
      try {
        await install(dir, b, a);
        const res = await fetch(`${t.adminUrl}/admin/reload`, { method: 'POST' });
        assert.equal(res.status, 422);
        const body = (await res.json()) as { errors: string[] };
        assert.match(
          body.errors[0]!,
          /listeners\[0\]\.tls: .*tls\.key is not the private key of the certificate/,
        );
        const c = await TlsClient.open(port);
        assert.equal(c.commonName, 'cert-a');
        assert.equal((await c.chat()).status, 200);
        c.close();
      } finally {
        await t.close();
      }
    });
  }

  it('own engine: serves requests pipelined over TLS in order, and refuses a client that speaks only h2', async () => {
    const { t, port } = await start(a, false, 16);
    try {
      const c = await TlsClient.open(port);
      try {
        const body = '{"model":"m","messages":[]}';
        const one = (id: string): string =>
          `POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nX-Request-Id: ${id}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
        const before = node!.requests.length;
        c.socket.write(one('seq-1') + one('seq-2') + one('seq-3'));
        const answers = [];
        for (let i = 0; i < 3; i++) answers.push(await c.readAnswer());
        assert.deepEqual(
          answers.map((r) => [r.status, r.requestId, r.body === OK_JSON]),
          [
            [200, 'seq-1', true],
            [200, 'seq-2', true],
            [200, 'seq-3', true],
          ],
          'each answer in the order of its request',
        );
        assert.equal(node!.requests.length - before, 3);
      } finally {
        c.close();
      }
      // RFC 7301 §3.2: no protocol in common ends the handshake with no_application_protocol.
      await assert.rejects(TlsClient.open(port, ['h2']), /no application protocol|alert number 120/i);
    } finally {
      await t.close();
    }
  });

  it('own engine: caps TLS connections at TCP accept and closes a silent handshake at header_timeout_ms', async () => {
    const { t, port } = await start(a, false, 16, '    max_connections: 3\n    header_timeout_ms: 600\n');
    try {
      // Five TCP connections that never send a ClientHello: three are held (inside their head
      // deadline), two are closed at once without costing a handshake.
      const opened = performance.now();
      const closedAfter = await Promise.all(
        Array.from(
          { length: 5 },
          () =>
            new Promise<number>((resolve) => {
              const s = netConnect({ host: '127.0.0.1', port });
              s.on('error', () => undefined);
              s.on('close', () => resolve(performance.now() - opened));
            }),
        ),
      );
      closedAfter.sort((x, y) => x - y);
      assert.ok(closedAfter[1]! < 400, `two refused at once: ${closedAfter.map(Math.round).join(', ')} ms`);
      for (const ms of closedAfter.slice(2))
        assert.ok(
          ms >= 500 && ms < 5000,
          `three closed by the deadline: ${closedAfter.map(Math.round).join(', ')} ms`,
        );
      assert.equal(await metric(t, 'sluice_listener_connections_refused_total{listener="public"}'), 2);
      // The slots are free again: a real client is served.
      const c = await TlsClient.open(port);
      assert.equal((await c.chat()).status, 200);
      c.close();
    } finally {
      await t.close();
    }
  });

  it('keeps serving keep-alive and new connections through certificate swaps under traffic', async (tc) => {
    const r = await runTlsSwap({ durationMs: 3500, keepAliveClients: 4, freshClients: 4 });
    tc.diagnostic(JSON.stringify({ ...r, failures: r.failures.slice(0, 3) }));
    assert.deepEqual(tlsSwapProblems(r), []);
  });

  it('refuses to start without its certificate, naming the file', async () => {
    await assert.rejects(
      startTestSluice(tlsConfig(node!.url)),
      (e: unknown) =>
        e instanceof ConfigInvalidError && /cannot read the certificate .*tls\.crt/.test(e.message),
    );
  });
});
