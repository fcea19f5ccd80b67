/**
 * Sticky sessions on a split route, through a real Sluice and real simulated nodes: a session id
 * is remembered in a few bytes whatever its length (a client sending long unique ids used to grow
 * the table by the size of each id, about 16 KB per session and 1.6 GB at the table's cap), and a
 * session with a long id still stays on its version when the weights change.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { startSimFleet, type SimFleet } from '../../loadtest/sim/fleet.js';
import { Worker } from 'node:worker_threads';
import { StickyStore, StickyTable, poolTag } from '../../proxy/route/sticky-table.js';
import { LOOPBACK_HEAD, chatRequest, startTestSluice, type TestSluice } from '../helpers/sluice.js';

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** Heap bytes in use after a full collection. */
function heldHeapBytes(): number {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
}

/** Length of each session id, characters (the size a long-header client would send). */
const ID_CHARS = 15_000;
const PAD = 'k'.repeat(ID_CHARS - 12);

/** A session id of `ID_CHARS` characters, unique per `i`. */
function longId(prefix: string, i: number): string {
  return `${prefix}${String(i).padStart(12 - prefix.length, '0')}${PAD}`;
}

function config(fleet: SimFleet, a: number, b: number): string {
  return `${LOOPBACK_HEAD}pools:
  - name: stable
    nodes:
      - url: ${fleet.urls[0]}
  - name: canary
    nodes:
      - url: ${fleet.urls[1]}
routes:
  - name: chat
    match: {}
    route_header: true
    split: [{ pool: stable, weight: ${a} }, { pool: canary, weight: ${b} }]
    sticky_header: x-session-id
`;
}

async function poolOf(t: TestSluice, session: string): Promise<string> {
  const r = await fetch(`${t.url}/v1/chat/completions`, chatRequest({}, { 'x-session-id': session }));
  assert.equal(r.status, 200);
  await r.arrayBuffer();
  return /pool=([\w-]+)/.exec(r.headers.get('x-sluice-route') ?? '')?.[1] ?? '?';
}

/** Sends one request per session `prefix`0 .. `prefix`(n-1), eight at a time. */
async function sendSessions(t: TestSluice, prefix: string, n: number): Promise<void> {
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < n) await poolOf(t, longId(prefix, next++));
  };
  await Promise.all(Array.from({ length: 8 }, worker));
}

describe('sticky sessions', { timeout: 60_000 }, () => {
  let fleet: SimFleet | undefined;
  let t: TestSluice | undefined;

  before(async () => {
    fleet = await startSimFleet({ nodes: 2, port: 0, profile: 'fast' });
    t = await startTestSluice(config(fleet, 50, 50));
  });

  after(async () => {
    await t?.close();
    await fleet?.close();
  });

  it('remembers a session by a few bytes, not by its id, however long the id is', async () => {
    assert.ok(t!.sluice.runtime.sticky.get('chat') !== undefined, 'the route has a sticky table');
    const table = t!.sluice.runtime.stickyStore!;
    // A first round grows what any run of requests keeps anyway (compiled code, connection pools,
    // metric windows: a few hundred KB, whether or not the sessions are new).
    await sendSessions(t!, 'w', 1000);
    const sessionsBefore = table.size;
    const heapBefore = heldHeapBytes();
    const n = 1500;
    await sendSessions(t!, 'm', n);
    const grew = heldHeapBytes() - heapBefore;
    assert.equal(table.size - sessionsBefore, n, 'every new session is remembered');
    // Each id is 15,000 characters: a table holding the ids grew by about 16 KB per session.
    const perSession = grew / n;
    assert.ok(
      perSession < 2048,
      `${(grew / 1048576).toFixed(2)} MiB more heap for ${n} sessions (${perSession.toFixed(0)} bytes each)`,
    );
  });

  it('keeps a session with a long id on the pool it started on when the weights change', async () => {
    const first = new Map<string, string>();
    for (let i = 0; i < 40; i++) {
      const id = longId('s', i);
      first.set(id, await poolOf(t!, id));
    }
    assert.equal(new Set(first.values()).size, 2, 'sessions spread over both pools');
    await writeFile(t!.configPath, config(fleet!, 1, 99));
    assert.equal((await t!.sluice.reload()).result, 'applied');
    for (const [session, pool] of first) assert.equal(await poolOf(t!, session), pool, session.slice(0, 12));
    let canary = 0;
    for (let i = 0; i < 40; i++) if ((await poolOf(t!, longId('n', i))) === 'canary') canary++;
    assert.ok(canary >= 35, `new sessions follow the new weights (${canary}/40 on canary)`);
  });
});

describe('the sticky store', () => {
  it('keeps a set of eight sessions and forgets its least recently used beyond them', () => {
    const store = new StickyStore({ sets: 1 });
    assert.equal(store.capacity, 8);
    for (let k = 1; k <= 8; k++) store.set(k, 100 + k);
    assert.equal(store.get(1), 101, 'a use makes key 1 the most recent');
    store.set(9, 109);
    store.set(10, 110);
    assert.equal(store.size, 8);
    assert.equal(store.get(2), 0, 'the least recently used is forgotten first');
    assert.equal(store.get(3), 0);
    assert.equal(store.get(1), 101);
    assert.equal(store.get(4), 104);
    assert.equal(store.get(10), 110);
    store.set(10, 7);
    assert.equal(store.get(10), 7, 'a key set again keeps one entry with the new tag');
    assert.equal(store.size, 8);
  });

  it("keeps each route's sessions apart and remembers 100,000 of them in the process's store", () => {
    const store = new StickyStore();
    const chat = new StickyTable(store, 'chat');
    const embed = new StickyTable(store, 'embed');
    const stable = poolTag('stable');
    const canary = poolTag('canary');
    assert.notEqual(stable, canary);
    for (let h = 0; h < 100_000; h++) chat.set(h, h % 2 === 0 ? stable : canary);
    embed.set(0, canary);
    let kept = 0;
    for (let h = 0; h < 100_000; h++) if (chat.get(h) === (h % 2 === 0 ? stable : canary)) kept++;
    // Eight entries to a set: a few sets got more than eight of the 100,001 keys.
    assert.ok(kept >= 99_500, `${kept} of 100,000 sessions remembered`);
    assert.equal(embed.get(0), canary);
    assert.equal(embed.get(1), 0, "another route's session is not this route's");
  });

  it('never writes over, nor stores a key beside, an entry another thread is writing', () => {
    // The layout (sticky-table.ts): 4 header words, then entries of 3 words (key, tag, last use).
    const store = new StickyStore({ sets: 1 });
    for (let k = 1; k <= 8; k++) store.set(k, 100 + k);
    const words = new Int32Array(store.buffer);
    // Another thread has claimed the least recently used entry (key 1's) and is writing it.
    const claimed = 4;
    assert.equal(words[claimed], 1);
    words[claimed] = -1;
    assert.equal(store.get(1), 0, "an entry being written is nobody's");
    store.set(9, 109);
    assert.equal(store.get(9), 0, 'a new key waits for the entry being written, then gives up');
    assert.deepEqual(
      [2, 3, 4, 5, 6, 7, 8].map((k) => store.get(k)),
      [102, 103, 104, 105, 106, 107, 108],
      'no other entry was evicted for it',
    );
    assert.equal(words[claimed], -1, 'the claimed entry was left to its writer');
    store.set(5, 55);
    assert.equal(store.get(5), 55, 'a key already in the set is updated in place');
    // The writer finishes: the entry is key 10's, and the set works as before.
    words[claimed + 1] = 110;
    words[claimed] = 10;
    assert.equal(store.get(10), 110);
    store.set(9, 109);
    assert.equal(store.get(9), 109);
    assert.equal(store.size, 8);
  });

  it('is one store for the threads that map its shared buffer', async () => {
    const store = new StickyStore({ shared: true });
    const table = new StickyTable(store, 'chat');
    for (let h = 0; h < 1000; h++) table.set(h, poolTag(h % 3 === 0 ? 'canary' : 'stable'));
    // Another thread reads them through its own view and writes 1000 of its own.
    const code = `
      const { workerData, parentPort } = require('node:worker_threads');
      import(workerData.module).then(({ StickyStore, StickyTable, poolTag }) => {
        const table = new StickyTable(new StickyStore({ buffer: workerData.buffer }), 'chat');
        let seen = 0;
        for (let h = 0; h < 1000; h++) if (table.get(h) === poolTag(h % 3 === 0 ? 'canary' : 'stable')) seen++;
        for (let h = 1000; h < 2000; h++) table.set(h, poolTag('canary'));
        parentPort.postMessage(seen);
      });`;
    const worker = new Worker(code, {
      eval: true,
      workerData: {
        buffer: store.buffer,
        module: new URL('../../proxy/route/sticky-table.js', import.meta.url).href,
      },
    });
    try {
      const seen = await new Promise<number>((resolve, reject) => {
        worker.once('message', resolve);
        worker.once('error', reject);
      });
      assert.equal(seen, 1000);
      for (let h = 1000; h < 2000; h++) assert.equal(table.get(h), poolTag('canary'), `session ${h}`);
    } finally {
      await worker.terminate();
    }
  });
});
