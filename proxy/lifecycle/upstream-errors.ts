/**
 * Maps transport errors from the upstream clients (Sluice's HTTP/1.1 client, undici for TLS nodes,
 * socket errno) onto catalogue entries. Unknown errors become `upstreamProtocol`, never an uncaught
 * exception.
 */
import { H1ErrorCode } from '../upstream/h1-client.js';
import { Errors, SluiceError } from './errors.js';

/** Socket errors that mean the connection was never established, so the node saw nothing. */
const CONNECT_ERRNOS = new Set([
  'ECONNREFUSED',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EADDRNOTAVAIL',
  // Before a connection is up only (after it, Sluice's client reports a reset whatever the errno).
  'ETIMEDOUT',
]);

/** No response head within the first-byte deadline (the client's or Sluice's own). */
export function ttfbTimeoutError(cause?: Error): SluiceError {
  return new SluiceError(Errors.ttfbTimeout, 'upstream node sent no response head in time', cause);
}

/** No body bytes within the body-gap deadline (the client's or Sluice's own). */
export function idleTimeoutError(cause?: Error): SluiceError {
  return new SluiceError(Errors.idleTimeout, 'upstream node stopped sending the response body', cause);
}

/** Turns an error raised by an upstream attempt into a SluiceError with the right kind. */
export function classifyUpstreamError(err: Error): SluiceError {
  const code = (err as { code?: unknown }).code;
  switch (code) {
    case H1ErrorCode.connectTimeout:
    case 'UND_ERR_CONNECT_TIMEOUT':
      return new SluiceError(Errors.connectTimeout, 'timed out connecting to the upstream node', err);
    case H1ErrorCode.headersTimeout:
    case 'UND_ERR_HEADERS_TIMEOUT':
      return ttfbTimeoutError(err);
    case H1ErrorCode.bodyTimeout:
    case 'UND_ERR_BODY_TIMEOUT':
      return idleTimeoutError(err);
    case H1ErrorCode.invalidRequest:
    case 'UND_ERR_INVALID_ARG':
      // The client's request cannot be sent as it is (a control byte in a header, a non-ASCII
      // path, an invalid method): the client's fault, never the node's.
      return new SluiceError(Errors.invalidRequest, `request cannot be forwarded: ${err.message}`, err);
    case H1ErrorCode.closed:
    case 'UND_ERR_SOCKET':
    case 'ECONNRESET':
    case 'EPIPE':
      return new SluiceError(Errors.upstreamReset, 'upstream node closed the connection unexpectedly', err);
    default:
      if (typeof code === 'string' && CONNECT_ERRNOS.has(code)) {
        return new SluiceError(Errors.connectFailed, `could not connect to the upstream node (${code})`, err);
      }
      return new SluiceError(Errors.upstreamProtocol, `upstream request failed: ${err.message}`, err);
  }
}
