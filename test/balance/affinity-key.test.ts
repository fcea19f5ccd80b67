/**
 * Affinity key extraction for each source (header, body field, tenant, prompt prefix), and its
 * robustness: odd or hostile bodies give null, never an exception.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { createAffinityExtractor, type AffinitySource } from '../../proxy/balance/affinity-key.js';
import { stableHashHex } from '../../proxy/balance/stable-hash.js';
import { promptPrefix } from '../helpers/prompt-prefix.js';

/** A source over plain data; header names are stored lower-case, as the session captures them. */
function source(opts: {
  headers?: Record<string, string>;
  body?: unknown;
  tenant?: string | null;
}): AffinitySource {
  return {
    header: (name) => opts.headers?.[name],
    json: () => (opts.body === undefined ? null : opts.body),
    tenant: opts.tenant ?? null,
  };
}

const chat = (system: string, ...user: string[]): unknown => ({
  model: 'llama-3-8b',
  messages: [{ role: 'system', content: system }, ...user.map((content) => ({ role: 'user', content }))],
});

describe('affinity key: header', () => {
  const extract = createAffinityExtractor({ source: 'header', name: 'X-Session-Id' });

  it('returns the header value, matching the name case-insensitively', () => {
    assert.equal(extract(source({ headers: { 'x-session-id': 'abc-123' } })), 'abc-123');
  });

  it('returns null when the header is missing or empty', () => {
    assert.equal(extract(source({})), null);
    assert.equal(extract(source({ headers: { 'x-session-id': '' } })), null);
  });
});

describe('affinity key: body field', () => {
  it('reads a dotted path', () => {
    const extract = createAffinityExtractor({ source: 'body_field', field: 'metadata.session_id' });
    assert.equal(extract(source({ body: { metadata: { session_id: 's-9' } } })), 's-9');
  });

  it('reads a top-level field', () => {
    const extract = createAffinityExtractor({ source: 'body_field', field: 'user' });
    assert.equal(extract(source({ body: { user: 'alice' } })), 'alice');
  });

  it('uses the text of numbers and booleans', () => {
    const extract = createAffinityExtractor({ source: 'body_field', field: 'user' });
    assert.equal(extract(source({ body: { user: 42 } })), '42');
    assert.equal(extract(source({ body: { user: false } })), 'false');
    assert.equal(extract(source({ body: { user: Number.NaN } })), null);
  });

  it('returns null for a missing path, a non-scalar value or no JSON body', () => {
    const extract = createAffinityExtractor({ source: 'body_field', field: 'metadata.session_id' });
    assert.equal(extract(source({ body: { metadata: {} } })), null);
    assert.equal(extract(source({ body: { metadata: 'flat' } })), null);
    assert.equal(extract(source({ body: { metadata: { session_id: { nested: 1 } } } })), null);
    assert.equal(extract(source({ body: { metadata: { session_id: '' } } })), null);
    assert.equal(extract(source({ body: [{ metadata: { session_id: 'x' } }] })), null);
    assert.equal(extract(source({ body: 'a string' })), null);
    assert.equal(extract(source({})), null);
  });

  it('does not follow inherited properties', () => {
    const extract = createAffinityExtractor({ source: 'body_field', field: 'constructor.name' });
    assert.equal(extract(source({ body: {} })), null);
  });

  it('returns null when reading the body throws', () => {
    const extract = createAffinityExtractor({ source: 'body_field', field: 'user' });
    const throwing: AffinitySource = {
      header: () => undefined,
      json: () => {
        throw new Error('bad body');
      },
      tenant: null,
    };
    assert.equal(extract(throwing), null);
  });
});

describe('affinity key: tenant', () => {
  const extract = createAffinityExtractor({ source: 'tenant' });

  it('returns the tenant, or null without one', () => {
    assert.equal(extract(source({ tenant: 'acme' })), 'acme');
    assert.equal(extract(source({ tenant: null })), null);
  });
});

describe('affinity key: prompt prefix', () => {
  const extract = createAffinityExtractor({ source: 'prefix', chars: 64 });
  const system = 'You are a helpful assistant for the ACME support desk. Answer politely.';

  it('is a short hex string', () => {
    assert.match(extract(source({ body: chat(system, 'hi') }))!, /^[0-9a-f]{8}$/);
  });

  it('is the same for requests that share the first N characters and differ after them', () => {
    const a = extract(source({ body: chat(system, 'How do I reset my password?') }));
    const b = extract(source({ body: chat(system, 'Where is my order?', 'It is late.') }));
    assert.equal(a, b);
  });

  it('differs for different system prompts', () => {
    const a = extract(source({ body: chat('You are a pirate.', 'hello') }));
    const b = extract(source({ body: chat('You are a lawyer.', 'hello') }));
    assert.notEqual(a, b);
  });

  it('differs when the messages differ within the first N characters', () => {
    const long = createAffinityExtractor({ source: 'prefix', chars: 512 });
    const a = long(source({ body: chat(system, 'How do I reset my password?') }));
    const b = long(source({ body: chat(system, 'Where is my order?') }));
    assert.notEqual(a, b);
  });

  it('is the stable hash of the prefix text, the text never built (surrogate pairs cut at the limit too)', () => {
    const texts = ['plain', 'é€日本', '🚀🚀🚀 rocket', 'x'.repeat(70), 'a\ud83d', '\ude80b', ''];
    let seed = 99;
    const next = (): number => (seed = (Math.imul(seed, 1103515245) + 12345) >>> 0);
    for (let round = 0; round < 500; round++) {
      const chars = 1 + (next() % 80);
      const pick = (): string => texts[next() % texts.length]!;
      const content =
        next() % 2 === 0 ? pick() : [{ type: 'text', text: pick() }, { type: 'image_url' }, pick()];
      const body = {
        system: next() % 4 === 0 ? pick() : undefined,
        messages: [
          { role: 'system', content: pick() },
          { role: 'user', content },
        ],
      };
      const text = promptPrefix(body, chars);
      const key = createAffinityExtractor({ source: 'prefix', chars })(source({ body }));
      assert.equal(key, text === '' ? null : stableHashHex(text), JSON.stringify({ body, chars }));
    }
  });

  it('includes role names', () => {
    const asSystem = extract(source({ body: { messages: [{ role: 'system', content: 'same text' }] } }));
    const asUser = extract(source({ body: { messages: [{ role: 'user', content: 'same text' }] } }));
    assert.notEqual(asSystem, asUser);
  });

  it('concatenates the text parts of OpenAI content-part arrays', () => {
    const parts = {
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Describe ' },
            { type: 'text', text: 'this picture.' },
          ],
        },
      ],
    };
    const plain = { messages: [{ role: 'user', content: 'Describe this picture.' }] };
    assert.equal(extract(source({ body: parts })), extract(source({ body: plain })));
    const withImage = {
      messages: [
        {
          role: 'user',
          content: [
            { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } },
            { type: 'text', text: 'Describe this picture.' },
          ],
        },
      ],
    };
    assert.notEqual(extract(source({ body: withImage })), null);
  });

  it('reads the prompt of a completion request (string, list, token ids)', () => {
    const long = 'Once upon a time, in a land far away, there lived a very long prompt indeed.';
    const a = extract(source({ body: { prompt: long } }));
    const b = extract(source({ body: { prompt: [long, 'another sequence'] } }));
    assert.notEqual(a, null);
    assert.equal(a, b);
    assert.notEqual(extract(source({ body: { prompt: [101, 2023, 2003] } })), null);
    assert.notEqual(extract(source({ body: { prompt: [[101, 2023]] } })), null);
  });

  it('puts a top-level system prompt first', () => {
    const a = extract(source({ body: { system: 'Be brief.', messages: [{ role: 'user', content: 'hi' }] } }));
    const b = extract(source({ body: { messages: [{ role: 'user', content: 'hi' }] } }));
    assert.notEqual(a, b);
    assert.equal(promptPrefix({ system: 'Be brief.', messages: [] }, 100), 'system: Be brief.\n');
  });

  it('stops at N characters', () => {
    assert.equal(promptPrefix({ messages: [{ role: 'user', content: 'abcdefghij' }] }, 8), 'user: ab');
  });

  it('spreads different prefixes over different keys', () => {
    const seen = new Set<string | null>();
    for (let i = 0; i < 1000; i++) seen.add(extract(source({ body: chat(`Persona ${i}.`, 'hello') })));
    assert.ok(seen.size >= 998, `${seen.size} distinct keys of 1000`);
  });

  it('returns null, without throwing, for bodies without a usable prompt', () => {
    const odd: unknown[] = [
      null,
      42,
      'text',
      [],
      {},
      { messages: null },
      { messages: 'not a list' },
      { messages: [] },
      { messages: [null, 7, 'x'] },
      { messages: [{ content: null }], prompt: 5 },
      { prompt: [] },
      { prompt: {} },
      { prompt: [null] },
    ];
    for (const body of odd) {
      assert.doesNotThrow(() => extract(source({ body })));
    }
    assert.equal(extract(source({ body: null })), null);
    assert.equal(extract(source({ body: { messages: [] } })), null);
    assert.equal(extract(source({ body: { prompt: [] } })), null);
  });

  it('keys messages with odd content by role alone rather than failing', () => {
    const key = extract(
      source({ body: { messages: [{ role: 'assistant', content: null, tool_calls: [] }] } }),
    );
    assert.match(key!, /^[0-9a-f]{8}$/);
  });

  it('falls back to 512 characters when chars is not a positive integer', () => {
    const bad = createAffinityExtractor({ source: 'prefix', chars: -3 });
    const def = createAffinityExtractor({ source: 'prefix', chars: 512 });
    const body = chat(system, 'x'.repeat(2000));
    assert.equal(bad(source({ body })), def(source({ body })));
  });
});
