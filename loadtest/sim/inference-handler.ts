/**
 * The common path of every inference request (chat, completions, embeddings) on a simulated node:
 * read the body, decide and apply faults (stall, injected error, drop), validate, then hand over to
 * the exchange that runs it. Routing and the fault *state* belong to the node.
 */

import type { IncomingMessage, ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { EmbeddingsExchange } from './embeddings-exchange.js';
import { FaultPatchError, decideFaults, readRequestOverrides, type SimFaults } from './faults.js';
import { GenerateExchange, type GenerateContext } from './generate-exchange.js';
import { BodyTooLargeError, readBody, sendError } from './http-io.js';
import { Outcome } from './node-counters.js';
import {
  InvalidRequestError,
  parseChatRequest,
  parseCompletionRequest,
  parseEmbeddingRequest,
  parseJsonObject,
} from './openai-request.js';
import type { SeededRandom } from './prng.js';

/** The inference endpoints, as named in counters and metrics. */
export type InferenceEndpoint = 'chat' | 'completion' | 'embedding';

/** What the handler needs from its node. */
export interface InferenceHost extends GenerateContext {
  /** The node's current fault state (not a copy; read, never written). */
  currentFaults(): Readonly<SimFaults>;
  /** Dice for rate-based faults. */
  faultRng: SeededRandom;
}

function checkModel(host: InferenceHost, requested: string, served: string): void {
  if (host.profile.strict_models && requested !== served) {
    throw new InvalidRequestError(`The model \`${requested}\` does not exist.`, 'model', 404);
  }
}

function drop(host: InferenceHost, endpoint: InferenceEndpoint, req: IncomingMessage): void {
  host.counters.record(endpoint, Outcome.dropped);
  req.socket.destroy();
}

/**
 * Serves one POST to an inference endpoint. Resolves once the request has been answered or handed to
 * an exchange (which finishes it on its own); rejects only on a simulator bug.
 */
export async function handleInference(
  host: InferenceHost,
  endpoint: InferenceEndpoint,
  req: IncomingMessage,
  res: ServerResponse,
): Promise<void> {
  let body: Buffer;
  try {
    body = await readBody(req);
  } catch (err) {
    if (err instanceof BodyTooLargeError)
      sendError(res, 413, err.message, 'request_too_large', { connection: 'close' });
    return;
  }
  let decision;
  try {
    decision = decideFaults(host.currentFaults(), readRequestOverrides(req.headers), host.faultRng);
  } catch (err) {
    if (!(err instanceof FaultPatchError)) throw err;
    return sendError(res, 400, err.message, 'invalid_sim_header');
  }
  if (decision.stallMs > 0) {
    await sleep(decision.stallMs);
    if (res.destroyed || host.currentFaults().crash) return;
  }
  if (decision.errorStatus > 0) {
    host.counters.recordInjectedError();
    host.counters.record(endpoint, decision.errorStatus);
    const headers = decision.retryAfter !== undefined ? { 'retry-after': decision.retryAfter } : undefined;
    return sendError(
      res,
      decision.errorStatus,
      'simulated failure (fault injection)',
      'sim_injected_error',
      headers,
    );
  }
  try {
    const json = parseJsonObject(body);
    if (endpoint === 'embedding') {
      const request = parseEmbeddingRequest(json);
      checkModel(host, request.model, host.profile.embedding_model);
      if (decision.dropAfter >= 0) return drop(host, endpoint, req);
      new EmbeddingsExchange(host, request, res).start();
      return;
    }
    const request = endpoint === 'chat' ? parseChatRequest(json) : parseCompletionRequest(json);
    checkModel(host, request.model, host.profile.chat_model);
    if (decision.dropAfter >= 0 && !request.stream) return drop(host, endpoint, req);
    new GenerateExchange(host, request, res, decision.dropAfter, decision.chunkDelayMs).start();
  } catch (err) {
    if (!(err instanceof InvalidRequestError)) throw err;
    host.counters.record(endpoint, err.status);
    sendError(res, err.status, err.message, err.status === 404 ? 'model_not_found' : 'invalid_request');
  }
}
