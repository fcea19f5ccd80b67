/**
 * A node that itself runs on uWebSockets.js writes `Date` and `uWebSockets` on every response, and
 * so does Sluice's uWS listener: the client must get each once, with the node's other headers.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { App, us_listen_socket_close, us_socket_local_port, type us_listen_socket } from 'uWebSockets.js';
import { rawRequest } from '../helpers/raw-http.js';
import { basicConfig, startTestSluice, type TestSluice } from '../helpers/sluice.js';

describe('headers of a node that runs on uWS', () => {
  let socket: us_listen_socket | null = null;
  let t: TestSluice | null = null;
  let nodeUrl = '';

  before(async () => {
    socket = await new Promise<us_listen_socket>((resolve, reject) => {
      App()
        .any('/*', (res) => {
          res.cork(() => {
            res.writeHeader('content-type', 'application/json').writeHeader('x-node', 'uws');
            res.end('{"ok":true}');
          });
        })
        .listen('127.0.0.1', 0, (s) => (s ? resolve(s) : reject(new Error('the uWS node cannot listen'))));
    });
    nodeUrl = `http://127.0.0.1:${us_socket_local_port(socket)}`;
    t = await startTestSluice(basicConfig([nodeUrl]));
  });

  after(async () => {
    try {
      await t?.close();
    } finally {
      if (socket !== null) us_listen_socket_close(socket);
    }
  });

  it('the node writes both marks itself (what the proxy must not repeat)', async () => {
    const { response, conn } = await rawRequest(nodeUrl, 'GET /v1/models HTTP/1.1\r\nHost: node\r\n\r\n');
    conn.destroy();
    assert.equal(response.headers.get('uwebsockets')?.length, 1);
    assert.equal(response.headers.get('date')?.length, 1);
  });

  it("answers through Sluice with one Date and one uWebSockets header, and the node's own headers", async () => {
    const { response, conn } = await rawRequest(t!.url, 'GET /v1/models HTTP/1.1\r\nHost: sluice\r\n\r\n');
    conn.destroy();
    assert.equal(response.status, 200);
    assert.deepEqual(response.headers.get('uwebsockets'), ['20']);
    assert.equal(response.headers.get('date')?.length, 1);
    assert.deepEqual(response.headers.get('x-node'), ['uws']);
    assert.equal(response.body.toString(), '{"ok":true}');
  });
});
