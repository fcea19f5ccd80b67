/**
 * Small HTTP helpers for the simulated node: reading a bounded request body and writing JSON and
 * OpenAI-shaped error replies. They never decide *what* to answer, only how it goes on the wire.
 */

import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http';
import { Outcome } from './node-counters.js';

/** Largest request body a node reads; larger bodies get 413 (vLLM has no lower limit worth modelling). */
export const MAX_BODY_BYTES = 64 * 1024 * 1024;

/** A request body that exceeded `MAX_BODY_BYTES`. */
export class BodyTooLargeError extends Error {
  override readonly name = 'BodyTooLargeError';
}

/** Reads the whole request body. Rejects with `BodyTooLargeError` past the limit, or on a socket error. */
export function readBody(req: IncomingMessage, limit = MAX_BODY_BYTES): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) {
        req.removeAllListeners('data');
        req.resume();
        reject(new BodyTooLargeError(`request body exceeds ${limit} bytes`));
        return;
      }
      parts.push(chunk);
    });
    req.once('end', () => resolve(Buffer.concat(parts, size)));
    req.once('error', reject);
    req.once('close', () => {
      if (!req.complete) reject(new Error('client closed the connection before the body ended'));
    });
  });
}

/** True when nothing more can be written to `res` (destroyed by us, or its socket is gone). */
export function isGone(res: ServerResponse): boolean {
  return res.destroyed || res.socket?.destroyed === true;
}

/** Writes a complete JSON response. Does nothing if the socket is already gone or the head went out. */
export function sendJson(
  res: ServerResponse,
  status: number,
  body: unknown,
  headers?: OutgoingHttpHeaders,
): void {
  if (isGone(res) || res.headersSent) return;
  sendJsonText(res, status, JSON.stringify(body), headers);
}

/** Writes a complete JSON response already serialised (`text`, or its UTF-8 bytes); as `sendJson`. */
export function sendJsonText(
  res: ServerResponse,
  status: number,
  text: string | Buffer,
  headers?: OutgoingHttpHeaders,
): void {
  if (isGone(res) || res.headersSent) return;
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    ...headers,
  });
  res.end(text);
}

/** OpenAI's error `type` for a status: 4xx are the caller's fault, 5xx the server's. */
export function errorTypeFor(status: number): string {
  if (status === 401) return 'authentication_error';
  if (status === 403) return 'permission_error';
  if (status === 404) return 'not_found_error';
  if (status === 429) return 'rate_limit_error';
  if (status < 500) return 'invalid_request_error';
  return status === 503 ? 'service_unavailable' : 'server_error';
}

/**
 * Writes an OpenAI-shaped error: `{"error": {"message", "type", "param": null, "code"}}`.
 * `code` defaults to a machine-readable name derived from the status.
 */
export function sendError(
  res: ServerResponse,
  status: number,
  message: string,
  code?: string,
  headers?: OutgoingHttpHeaders,
): void {
  const body = {
    error: { message, type: errorTypeFor(status), param: null, code: code ?? `http_${status}` },
  };
  sendJson(res, status, body, headers);
}

/**
 * Ends the response of a job the engine dropped (crash or shutdown): 503 `engine_restarted` while
 * the head has not gone out, else the connection is destroyed. Returns the outcome to count.
 */
export function failEngineRestart(res: ServerResponse): 503 | typeof Outcome.dropped {
  if (!res.headersSent && !isGone(res)) {
    sendError(res, 503, 'the inference engine restarted', 'engine_restarted');
    return 503;
  }
  res.destroy();
  return Outcome.dropped;
}
