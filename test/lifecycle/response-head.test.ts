/**
 * Reading a node's raw response head: hop-by-hop and server-written headers are dropped, names are
 * lower-cased, repeated headers are kept, and the values the session needs are picked out.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { readResponseHead } from '../../proxy/lifecycle/headers.js';

const raw = (...pairs: string[]): Buffer[] => pairs.map((p) => Buffer.from(p, 'latin1'));

describe('response head', () => {
  it('drops hop-by-hop and server-written headers and appends x-request-id', () => {
    const h = readResponseHead(
      raw(
        'Content-Type',
        'application/json',
        'Content-Length',
        '12',
        'Connection',
        'keep-alive',
        'Keep-Alive',
        'timeout=5',
        'Transfer-Encoding',
        'chunked',
        'Date',
        'Wed, 25 Nov 2026 10:00:00 GMT',
        'uWebSockets',
        '20',
        'X-Request-Id',
        'from-node',
        'X-Model',
        'llama',
      ),
      'req-1',
    );
    assert.deepEqual(h.headers, [
      'content-type',
      'application/json',
      'x-model',
      'llama',
      'x-request-id',
      'req-1',
    ]);
    assert.equal(h.contentType, 'application/json');
    assert.equal(h.contentLength, '12');
    assert.equal(h.retryAfter, undefined);
  });

  it('drops headers the Connection header names, and keeps repeated values', () => {
    const h = readResponseHead(
      raw('connection', 'x-hop, close', 'x-hop', 'secret', 'set-cookie', 'a=1', 'set-cookie', 'b=2'),
      'r',
    );
    assert.deepEqual(h.headers, ['set-cookie', 'a=1', 'set-cookie', 'b=2', 'x-request-id', 'r']);
  });

  it('reports retry-after and no length or type when absent', () => {
    const h = readResponseHead(raw('Retry-After', '3'), 'r');
    assert.equal(h.retryAfter, '3');
    assert.equal(h.contentLength, '');
    assert.equal(h.contentType, '');
    assert.deepEqual(h.headers, ['retry-after', '3', 'x-request-id', 'r']);
  });
});
