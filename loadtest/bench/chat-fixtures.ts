/**
 * The bytes the proxy benchmark sends and answers: one chat completion request of 1,011 bytes (a
 * system prompt and a user message longer than the 600 characters the prefix-affinity key reads), the
 * 578-byte completion the stand-in node returns for it, and the fixed SSE stream it returns when the
 * request says `"stream": true`. Pure data: no I/O.
 */

/** Model name in every request and answer. */
export const BENCH_MODEL = 'bench-model-8b-instruct';

/** API key the benchmark's clients send; the full Sluice configuration knows it as tenant `bench`. */
export const BENCH_API_KEY = 'sk-bench-000000000000000000000000';

/** Number of SSE writes in one streamed answer (the last carries `finish_reason` and `[DONE]`). */
export const STREAM_CHUNKS = 64;

const SYSTEM_PROMPT =
  'You answer questions about running large language models in production. Reply in plain prose, ' +
  'two or three sentences, no lists, no code blocks, and never ask a question back.';

const USER_MESSAGE =
  'A fleet of inference servers sits behind one gateway that authenticates tenants, enforces token ' +
  'budgets and picks a node per request. Explain what the gateway should measure to know whether it ' +
  'adds latency of its own, how connection reuse towards the nodes changes that figure, and why a ' +
  'request that shares its opening messages with an earlier one should land on the same node. The ' +
  'remaining words only bring the body to the size of a typical small chat request from an ' +
  'OpenAI-compatible client library: a system prompt, one user turn, a few sampling settings and a user tag, nothing more.';

/** The chat request as an object (`stream` selects the plain or the streamed answer). */
export function chatRequest(stream: boolean): Record<string, unknown> {
  return {
    model: BENCH_MODEL,
    messages: [
      { role: 'system', content: SYSTEM_PROMPT },
      { role: 'user', content: USER_MESSAGE },
    ],
    temperature: 0.2,
    top_p: 1,
    max_tokens: 256,
    stream,
    user: 'bench-user-0001-'.padEnd(69, 'x'),
  };
}

/** The request body the load generator POSTs (`stream: false`): 1,011 bytes. */
export const CHAT_BODY = JSON.stringify(chatRequest(false));
/** The same request with `stream: true` (1,010 bytes). */
export const STREAM_BODY = JSON.stringify(chatRequest(true));

/** The non-streamed answer: a fixed chat.completion of 578 bytes. */
export const COMPLETION_BODY = JSON.stringify({
  id: 'chatcmpl-bench-000000000000000000000000',
  object: 'chat.completion',
  created: 1764000000,
  model: BENCH_MODEL,
  system_fingerprint: 'fp_bench_0001',
  choices: [
    {
      index: 0,
      message: {
        role: 'assistant',
        content:
          'Measure CPU per request against a bare forwarder on the same machine, keep ' +
          'connections to the nodes warm so no request pays a handshake, and send shared ' +
          'prefixes to one node so that its KV cache can skip the prefills.',
        refusal: null,
      },
      logprobs: null,
      finish_reason: 'stop',
    },
  ],
  usage: { prompt_tokens: 231, completion_tokens: 52, total_tokens: 283 },
});

/** One `data:` event of the stream, about 150 bytes. */
function streamEvent(i: number, last: boolean): string {
  const chunk = {
    id: 'c-1',
    object: 'chat.completion.chunk',
    model: BENCH_MODEL,
    choices: [
      {
        index: 0,
        delta: last ? {} : { content: ` t${String(i).padStart(2, '0')}` },
        finish_reason: last ? 'stop' : null,
      },
    ],
  };
  return `data: ${JSON.stringify(chunk)}\n\n`;
}

/**
 * The streamed answer as `STREAM_CHUNKS` writes: 63 content events and a last write holding the
 * closing event and `data: [DONE]`. A stand-in writes each element separately (paced or at once).
 */
export const STREAM_WRITES: readonly string[] = Array.from({ length: STREAM_CHUNKS }, (_, i) =>
  i < STREAM_CHUNKS - 1 ? streamEvent(i, false) : `${streamEvent(i, true)}data: [DONE]\n\n`,
);
