/**
 * Copies a request head out of uWS's stack-allocated HttpRequest (valid only inside the handler)
 * and validates its framing before anything is routed. Ambiguous framing is refused here, because
 * the parser underneath accepts repeated Content-Length, repeated Host and odd Transfer-Encodings.
 */
import type { HttpRequest } from 'uWebSockets.js';
import { HOP_BY_HOP, connectionTokens, removeNamed } from '../lifecycle/headers.js';

/**
 * The captured head. One instance is reused for every request: capture runs synchronously inside
 * the uWS handler, and the listener copies what it keeps into the Session before returning.
 */
export interface RequestHead {
  method: string;
  /** Path with query string. */
  url: string;
  path: string;
  hostName: string;
  /** Forwarded headers, flat `[name, value, ...]` (a fresh array per request). */
  headers: string[];
  requestId: string | null;
  /** Declared body length, -1 when absent. */
  contentLength: number;
  chunked: boolean;
  /** Bytes of header names and values. */
  headerBytes: number;
  /** Why the framing is refused, or null when it is acceptable. */
  framingError: string | null;
}

const head: RequestHead = {
  method: '',
  url: '',
  path: '',
  hostName: '',
  headers: [],
  requestId: null,
  contentLength: -1,
  chunked: false,
  headerBytes: 0,
  framingError: null,
};

/** Scratch counters written by the forEach callback (module-level so no closure is allocated). */
let hostCount = 0;
let clCount = 0;
let teCount = 0;
let teValue = '';
let clValue = '';
let hostValue = '';
let xff = '';
let connection = '';

const REQUEST_ID = /^[\w.:@/+=-]{1,128}$/;
const CONTENT_LENGTH = /^\d{1,15}$/;

function onHeader(name: string, value: string): void {
  // HOT
  head.headerBytes += name.length + value.length + 4;
  switch (name) {
    case 'host':
      hostCount++;
      hostValue = value;
      return;
    case 'content-length':
      clCount++;
      clValue = value;
      return;
    case 'transfer-encoding':
      teCount++;
      teValue = value;
      return;
    case 'x-forwarded-for':
      xff = xff === '' ? value : `${xff}, ${value}`;
      return;
    case 'x-request-id':
      if (REQUEST_ID.test(value)) head.requestId = value;
      return;
    case 'connection':
      connection = connection === '' ? value : `${connection}, ${value}`;
      return;
    case 'expect':
      return;
    default:
      if (HOP_BY_HOP.has(name)) return;
      head.headers.push(name, value);
  }
}

/**
 * Captures the head of `req`. `remoteAddress` is the client IP as text; `proto` the scheme the
 * client used (`x-forwarded-proto`). Returns the shared RequestHead; read it before the handler
 * returns.
 */
export function captureHead(req: HttpRequest, remoteAddress: string, proto = 'http'): RequestHead {
  // HOT
  hostCount = 0;
  clCount = 0;
  teCount = 0;
  teValue = '';
  clValue = '';
  hostValue = '';
  xff = '';
  connection = '';
  head.headers = [];
  head.requestId = null;
  head.headerBytes = 0;
  head.framingError = null;
  head.method = req.getCaseSensitiveMethod();
  const path = req.getUrl();
  // The uWS build in use returns undefined (not '') when the URL has no query string.
  const query = req.getQuery() as string | undefined;
  head.path = path;
  head.url = query === undefined || query === '' ? path : `${path}?${query}`;
  req.forEach(onHeader);

  if (clCount > 1) head.framingError = 'more than one Content-Length header';
  else if (teCount > 1) head.framingError = 'more than one Transfer-Encoding header';
  else if (teCount === 1 && teValue.trim().toLowerCase() !== 'chunked')
    head.framingError = 'Transfer-Encoding other than plain "chunked" is not accepted';
  else if (teCount === 1 && clCount === 1) head.framingError = 'both Content-Length and Transfer-Encoding';
  else if (hostCount !== 1)
    head.framingError = hostCount === 0 ? 'missing Host header' : 'more than one Host header';
  head.chunked = teCount === 1;
  head.contentLength = clCount === 1 ? Number(clValue) : -1;
  if (clCount === 1 && !CONTENT_LENGTH.test(clValue)) head.framingError = 'invalid Content-Length';

  head.hostName = hostWithoutPort(hostValue);
  if (connection !== '') {
    const named = connectionTokens(connection);
    if (named !== null) removeNamed(head.headers, named);
  }
  head.headers.push(
    'x-forwarded-for',
    xff === '' ? remoteAddress : `${xff}, ${remoteAddress}`,
    'x-forwarded-host',
    hostValue,
    'x-forwarded-proto',
    proto,
  );
  return head;
}

function hostWithoutPort(host: string): string {
  const h = host.toLowerCase();
  if (h.startsWith('[')) {
    const end = h.indexOf(']');
    return end < 0 ? h : h.slice(0, end + 1);
  }
  const colon = h.indexOf(':');
  return colon < 0 ? h : h.slice(0, colon);
}
