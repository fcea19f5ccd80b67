/**
 * A listener port another process already holds stops startup with a clear error, on either engine
 * and with or without TLS: uWS binds with `SO_REUSEPORT` unless told otherwise, which let a second
 * Sluice share the port and silently take part of the first one's traffic.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../loadtest/env/free-port.js';
import { makeSelfSigned, type SelfSigned } from '../../loadtest/env/self-signed.js';
import { ENGINES } from '../helpers/engines.js';
import { refusedPort } from '../helpers/refused-port.js';
import { startTestSluice, type TestSluice } from '../helpers/sluice.js';

/** A config with one listener on `port` (`tls` when a certificate is given) and one (dead) node. */
function config(port: number, pipelining: number, node: string, cert: SelfSigned | null): string {
  const tls = cert === null ? '' : `    tls: { cert_file: ${cert.certFile}, key_file: ${cert.keyFile} }\n`;
  return `listeners:
  - name: public
    address: 127.0.0.1
    port: ${port}
    pipelining: ${pipelining}
${tls}admin:
  address: 127.0.0.1
  port: 0
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

/**
 * Starts a Sluice on a port that was free a moment ago; tries another when a server elsewhere took
 * it in between (the port is chosen before the bind, so that the second Sluice can be given it).
 */
async function startOnFreePort(yaml: (port: number) => string): Promise<{ port: number; first: TestSluice }> {
  for (let i = 0; ; i++) {
    const port = await freePort();
    try {
      return { port, first: await startTestSluice(yaml(port)) };
    } catch (e) {
      if (i >= 4 || !/cannot bind/.test((e as Error).message)) throw e;
    }
  }
}

describe('listener bind', { timeout: 60_000 }, () => {
  let certs = '';
  let cert: SelfSigned;
  let node = '';

  before(async () => {
    certs = await mkdtemp(join(tmpdir(), 'sluice-bind-'));
    cert = await makeSelfSigned(certs, 'bind');
    node = `http://127.0.0.1:${await refusedPort()}`;
  });

  after(async () => {
    if (certs !== '') await rm(certs, { recursive: true, force: true });
  });

  for (const engine of ENGINES) {
    for (const https of [false, true]) {
      const kind = `${engine.name}${https ? ' with TLS' : ''}`;
      it(`${kind}: a second Sluice on a port the first holds fails to start with a clear error`, async () => {
        const c = https ? cert : null;
        // A configured port, not 0: uWS sets SO_REUSEPORT only on a socket bound to a given port.
        const { port, first } = await startOnFreePort((p) => config(p, engine.pipelining, node, c));
        let second: TestSluice | null = null;
        try {
          await assert.rejects(
            async () => {
              second = await startTestSluice(config(port, engine.pipelining, node, c));
            },
            (e: Error) => {
              assert.match(
                e.message,
                new RegExp(`^listener public: cannot bind 127\\.0\\.0\\.1:${port} \\(`),
              );
              return true;
            },
          );
        } finally {
          await (second as TestSluice | null)?.close();
          await first.close();
        }
      });
    }
  }
});
