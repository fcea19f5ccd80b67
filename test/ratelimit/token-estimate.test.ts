/**
 * Unit tests of the token estimate debited at admission and of reading real usage from responses.
 */
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import {
  DEFAULT_MAX_TOKENS,
  estimateRequestTokens,
  usageTokens,
} from '../../proxy/ratelimit/token-estimate.js';

describe('token estimate', () => {
  it('counts chat message text at four characters per token, rounded up, plus max_tokens', () => {
    const body = {
      model: 'm',
      messages: [
        { role: 'system', content: 'abcd' },
        { role: 'user', content: 'efghi' },
      ],
      max_tokens: 50,
    };
    assert.deepEqual(estimateRequestTokens(body), { prompt: 3, maxTokens: 50 });
  });

  it('counts text parts and tool-call arguments of messages', () => {
    const body = {
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: '12345678' },
            { type: 'image_url', image_url: { url: 'x' } },
          ],
        },
        { role: 'assistant', content: null, tool_calls: [{ function: { name: 'f', arguments: '{"a":1}' } }] },
      ],
      max_completion_tokens: 10,
    };
    assert.deepEqual(estimateRequestTokens(body), { prompt: 4, maxTokens: 10 }); // 8 + 7 chars
  });

  it('prefers max_completion_tokens over max_tokens and multiplies by n', () => {
    assert.equal(
      estimateRequestTokens({ messages: [], max_completion_tokens: 7, max_tokens: 99 }).maxTokens,
      7,
    );
    assert.equal(estimateRequestTokens({ messages: [], max_tokens: 10, n: 3 }).maxTokens, 30);
  });

  it('uses the default completion budget for generating requests without a maximum', () => {
    assert.equal(estimateRequestTokens({ prompt: 'hi' }).maxTokens, DEFAULT_MAX_TOKENS);
    assert.equal(estimateRequestTokens({ messages: [] }, 256).maxTokens, 256);
    assert.equal(estimateRequestTokens({ prompt: 'hi', max_tokens: 'many' }, 256).maxTokens, 256);
  });

  it('reads a maximum of 0 as absent, as the servers do (no cap), not as a free request', () => {
    const e = estimateRequestTokens({ messages: [], max_completion_tokens: 0, max_tokens: 5000 });
    assert.equal(e.maxTokens, 5000);
    assert.equal(estimateRequestTokens({ prompt: 'hi', max_tokens: 0 }, 256).maxTokens, 256);
  });

  it('counts completion prompts given as strings, string arrays or token ids', () => {
    assert.equal(estimateRequestTokens({ prompt: 'abcdefgh' }).prompt, 2);
    assert.equal(estimateRequestTokens({ prompt: ['abcd', 'efgh', 'i'] }).prompt, 3);
    assert.equal(estimateRequestTokens({ prompt: [1, 2, 3, 4, 5] }).prompt, 5);
    assert.equal(estimateRequestTokens({ prompt: [[1, 2], [3]] }).prompt, 3);
  });

  it('charges embeddings input and no completion', () => {
    assert.deepEqual(estimateRequestTokens({ model: 'e', input: ['abcd', 'efgh'] }), {
      prompt: 2,
      maxTokens: 0,
    });
  });

  it('counts Responses-style input messages and instructions, with max_output_tokens', () => {
    const body = {
      instructions: 'abcd',
      input: [{ role: 'user', content: [{ type: 'input_text', text: 'efgh' }] }],
      max_output_tokens: 40,
    };
    assert.deepEqual(estimateRequestTokens(body), { prompt: 2, maxTokens: 40 });
  });

  it('costs nothing for a body that is not a JSON object', () => {
    for (const b of [null, undefined, 'text', 42, [1, 2]]) {
      assert.deepEqual(estimateRequestTokens(b), { prompt: 0, maxTokens: 0 });
    }
  });

  it('stops descending into absurdly nested content', () => {
    let deep: unknown = 'abcd';
    for (let i = 0; i < 50; i++) deep = [deep];
    assert.equal(estimateRequestTokens({ input: deep }).prompt, 0);
  });

  it('reads total tokens from chat, completions and Responses usage', () => {
    assert.equal(usageTokens({ prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 }), 15);
    assert.equal(usageTokens({ prompt_tokens: 10, completion_tokens: 5 }), 15);
    assert.equal(usageTokens({ input_tokens: 3, output_tokens: 4 }), 7);
    assert.equal(usageTokens({ prompt_tokens: 8 }), 8);
    assert.equal(usageTokens({}), null);
    assert.equal(usageTokens(null), null);
    assert.equal(usageTokens({ total_tokens: -1 }), null);
  });
});
