/**
 * The admin listener against hostile requests: a request target that is not a path is a 400 (it
 * used to end the process), a listener without a token answers only requests addressed to an IP
 * address or localhost (DNS rebinding), and a POST from another origin is refused (a browser logged
 * in to the status page would send its credentials with another site's form), and no answer may be
 * framed by another page (clickjacking the status page's drain buttons).
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { rawRequest } from '../helpers/raw-http.js';
import { basicConfig, startTestSluice, type TestSluice } from '../helpers/sluice.js';

/** One request to the admin port with the headers given (Host included), as a status and body. */
async function adminRequest(
  t: TestSluice,
  method: string,
  path: string,
  headers: Record<string, string>,
): Promise<{ status: number; body: string }> {
  const fields = Object.entries({ host: '127.0.0.1', ...headers, 'content-length': '0' })
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
  const { response, conn } = await rawRequest(t.adminUrl, `${method} ${path} HTTP/1.1\r\n${fields}\r\n`);
  conn.destroy();
  return { status: response.status, body: response.body.toString('utf8') };
}

describe('admin listener without a token, against hostile requests', { timeout: 30_000 }, () => {
  let fleet: SimFleet | undefined;
  let t: TestSluice | undefined;

  before(async () => {
    fleet = await startSimFleet({ nodes: 1, port: 0, profile: 'fast' });
    t = await startTestSluice(basicConfig(fleet.urls));
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('answers a request target that is not a path with 400 and keeps serving', async () => {
    for (const target of ['http://[/metrics', '//a:b', 'http://127.0.0.1/metrics']) {
      const { response, conn } = await rawRequest(
        t!.adminUrl,
        `GET ${target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`,
      );
      conn.destroy();
      assert.equal(response.status, 400, target);
    }
    const alive = await adminRequest(t!, 'GET', '/admin/nodes', {});
    assert.equal(alive.status, 200);
    const proxied = await fetch(`${t!.url}/v1/models`);
    assert.equal(proxied.status, 200);
    await proxied.text();
  });

  it('refuses a request addressed by another name, and answers one addressed to an IP or localhost', async () => {
    const rebind = await adminRequest(t!, 'GET', '/admin/config', { host: 'rebind.attacker.example:9901' });
    assert.equal(rebind.status, 403);
    assert.equal((JSON.parse(rebind.body) as { error: { code: string } }).error.code, 'admin_host_refused');
    assert.doesNotMatch(rebind.body, /pools/);
    for (const host of ['127.0.0.1:9901', 'localhost:9901', '[::1]:9901', 'LOCALHOST']) {
      const ok = await adminRequest(t!, 'GET', '/admin/config', { host });
      assert.equal(ok.status, 200, host);
    }
    // Liveness and readiness probes may use any name.
    assert.equal((await adminRequest(t!, 'GET', '/healthz', { host: 'sluice-admin.svc' })).status, 200);
    assert.equal((await adminRequest(t!, 'GET', '/readyz', { host: 'sluice-admin.svc' })).status, 200);
  });

  it('forbids framing and type sniffing on every answer, the status page first', async () => {
    // A page framing the status page at low opacity got real clicks on its drain buttons.
    for (const path of ['/', '/status', '/admin/nodes', '/metrics', '/healthz', '/no-such-endpoint']) {
      const res = await fetch(`${t!.adminUrl}${path}`);
      await res.arrayBuffer();
      assert.equal(res.headers.get('x-frame-options'), 'DENY', path);
      assert.equal(res.headers.get('content-security-policy'), "frame-ancestors 'none'", path);
      assert.equal(res.headers.get('x-content-type-options'), 'nosniff', path);
    }
    const page = await fetch(`${t!.adminUrl}/`);
    assert.match(await page.text(), /<html/i);
    assert.equal(page.status, 200);
  });

  it('refuses a POST from another origin, and takes one from its own', async () => {
    const host = new URL(t!.adminUrl).host;
    const foreign = await adminRequest(t!, 'POST', '/admin/nodes/gpu/0/drain', {
      host,
      origin: 'http://evil.example',
      'content-type': 'application/x-www-form-urlencoded',
    });
    assert.equal(foreign.status, 403);
    assert.equal((JSON.parse(foreign.body) as { error: { code: string } }).error.code, 'admin_cross_origin');
    const pools = JSON.parse((await adminRequest(t!, 'GET', '/admin/nodes', {})).body) as {
      nodes: { drained: boolean }[];
    }[];
    assert.equal(pools[0]!.nodes[0]!.drained, false);
    const own = await adminRequest(t!, 'POST', '/admin/nodes/gpu/0/drain', {
      host,
      origin: `http://${host}`,
    });
    assert.equal(own.status, 200);
    const tool = await adminRequest(t!, 'POST', '/admin/nodes/gpu/0/undrain', { host });
    assert.equal(tool.status, 200);
  });
});
