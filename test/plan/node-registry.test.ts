/**
 * The node registry keeps an operator's drain per pool and node, whatever objects reloads make for
 * the node: a new object (changed connection settings) and a reused one follow the latest drain or
 * undrain, and a node the pool no longer has forgets it.
 */
import { afterEach, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { NodeRegistry } from '../../proxy/upstream/node-registry.js';
import type { UpstreamNode } from '../../proxy/upstream/upstream-node.js';

const URL_A = 'http://127.0.0.1:7';
const opts = (connectTimeoutMs: number): { connections: number; connectTimeoutMs: number } => ({
  connections: 1,
  connectTimeoutMs,
});

describe('node registry drains', () => {
  const held: UpstreamNode[] = [];
  let r = new NodeRegistry();
  afterEach(async () => {
    for (const n of held.splice(0)) while (n.refs > 0) r.release(n);
    await r.destroyAll();
    r = new NodeRegistry();
  });
  const take = (pool: string, ms: number): UpstreamNode => {
    const n = r.acquire(pool, URL_A, opts(ms));
    held.push(n);
    return n;
  };

  it('applies the latest drain or undrain to new and reused objects of the node', () => {
    const n1 = take('gpu', 1000);
    r.setDrained(n1, true);
    const n2 = take('gpu', 2000);
    assert.equal(n2.drained, true, 'a new object of a drained node');
    r.setDrained(n2, false);
    assert.equal(n1.drained, false, 'the older object follows the undrain');
    const again = take('gpu', 1000);
    assert.equal(again, n1);
    assert.equal(again.drained, false, 'a reused object does not bring its old drain back');
    assert.equal(take('other', 1000).drained, false, 'another pool with the same URL is its own node');
  });

  it('keeps the drain while any object of the node lives, and forgets it once none does', () => {
    const n1 = take('gpu', 1000);
    r.setDrained(n1, true);
    const n2 = take('gpu', 2000);
    r.release(n1);
    held.splice(held.indexOf(n1), 1);
    assert.equal(take('gpu', 3000).drained, true);
    for (const n of held.splice(0)) while (n.refs > 0) r.release(n);
    assert.equal(n2.refs, 0);
    assert.equal(take('gpu', 1000).drained, false, 'removed from the pool, then added again: undrained');
  });
});
