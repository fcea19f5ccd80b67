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

describe('response head names', () => {
  it('reads known names in any case, and names that only look like them as themselves', () => {
    const forwarded = [
      ['SERVER', 'uvicorn'],
      ['Cache-Control', 'no-cache'],
      ['VARY', 'origin'],
      ['CONTENT-TYPE', 'text/event-stream'],
      // Same lengths as known names, one byte apart: not those names.
      ['content-typf', 'a'],
      ['dat3', 'b'],
      ['x-request-ie', 'c'],
    ];
    const dropped = [
      ['KEEP-ALIVE', 'timeout=5'],
      ['DATE', 'Wed, 25 Nov 2026 10:00:00 GMT'],
    ];
    const h = readResponseHead(raw(...[...forwarded, ...dropped].flat()), 'r');
    const expected = forwarded.flatMap(([n, v]) => [n!.toLowerCase(), v!]);
    assert.deepEqual(h.headers, [...expected, 'x-request-id', 'r']);
    assert.equal(h.contentType, 'text/event-stream');
  });

  it('reads the values it needs of known names it does not forward', () => {
    const h = readResponseHead(
      raw('Content-Length', '7', 'TRANSFER-ENCODING', 'chunked', 'Connection', 'x-a', 'x-a', '1'),
      'r',
    );
    assert.equal(h.contentLength, '7');
    assert.equal(h.transferEncoding, 'chunked');
    assert.deepEqual(h.headers, ['x-request-id', 'r']);
  });
});

describe('response head bytes', () => {
  it('is not binary when every forwarded value is ASCII', () => {
    assert.equal(readResponseHead(raw('Content-Type', 'text/plain', 'X-A', '1'), 'r').binary, false);
    assert.equal(readResponseHead([], 'r').binary, false);
    // A header that is not forwarded does not count.
    assert.equal(readResponseHead(raw('Date', 'caf\u00e9', 'X-A', '1'), 'r').binary, false);
  });

  it('is binary when a forwarded value holds a byte of 0x80 or above, kept as a byte string', () => {
    const read = Buffer.concat([
      Buffer.from('X-A: caf'),
      Buffer.from([0xc3, 0xa9]),
      Buffer.from('\r\nX-B: 1\r\n'),
    ]);
    const h = readResponseHead(
      [read.subarray(0, 3), read.subarray(5, 10), read.subarray(12, 15), read.subarray(17, 18)],
      'r',
    );
    assert.equal(h.binary, true);
    assert.deepEqual(h.headers, ['x-a', 'caf\u00c3\u00a9', 'x-b', '1', 'x-request-id', 'r']);
    assert.equal(readResponseHead([Buffer.from('x-c'), Buffer.from([0x61, 0xe9])], 'r').binary, true);
    // The shared head is reset by the next read.
    assert.equal(readResponseHead(raw('x-d', 'ok'), 'r').binary, false);
  });
});
