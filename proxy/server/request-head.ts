/**
 * Copies a request head out of the engine that parsed it (uWS's stack-allocated HttpRequest, valid
 * only inside the handler, or Sluice's own parser) and validates its framing and Host before
 * anything is routed. Ambiguous framing is refused here, because the uWS parser accepts repeated
 * Content-Length, repeated Host and odd Transfer-Encodings. Both engines go through `beginHead`,
 * `addHeader` and `endHead`, so the rules exist once.
 */
import type { HttpRequest } from 'uWebSockets.js';
import { REQUEST_NOT_FORWARDED, connectionTokens, removeNamed } from '../lifecycle/headers.js';
import { bearerKey } from '../tenant/api-key.js';

/**
 * The captured head. One instance is reused for every request: capture runs synchronously, and
 * the listener copies what it keeps into the Session before returning.
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
  /** Header fields in the head. */
  headerCount: number;
  /** True for an HTTP/1.0 request. */
  http10: boolean;
  /** True when the connection must close after this request (`Connection: close`, HTTP/1.0 without keep-alive). */
  closeAfter: boolean;
  /** True when the client waits for `100 Continue` before it sends the body. */
  expectContinue: boolean;
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
  headerCount: 0,
  http10: false,
  closeAfter: false,
  expectContinue: false,
  framingError: null,
};

/** Scratch counters written by `addHeader` (module-level so no closure is allocated). */
let hostCount = 0;
let clCount = 0;
let teCount = 0;
let teValue = '';
let clValue = '';
let hostValue = '';
let xff = '';
/** Authorization fields seen: one at most (a second could be read by a node for another tenant). */
let authCount = 0;
let authValue = '';
/** x-api-key fields seen, and the first one's value. */
let apiKeyCount = 0;
let apiKeyValue = '';
/** The client's own X-Forwarded-Host / -Proto and Forwarded (kept only on a trusting listener). */
let clientXfh = '';
let clientXfp = '';
let clientFwd = '';
let connection = '';
/** The authority of an absolute-form target (`http://host/path`), which replaces Host (RFC 9112 §3.2.2). */
let targetAuthority = '';

const REQUEST_ID = /^[\w.:@/+=-]{1,128}$/;
const CONTENT_LENGTH = /^\d{1,15}$/;
/**
 * `uri-host [ ":" port ]` (RFC 9112 §3.2, RFC 3986 §3.2.2): an IP literal in brackets or a reg-name
 * (no userinfo, no spaces), then an optional all-digit port.
 */
const HOST = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9\-._~!$&'()*+,;=%]*)(?::[0-9]*)?$/;
/**
 * A character a request target may not hold (RFC 9112 §3.2, RFC 3986 §2: visible ASCII only). uWS
 * hands the target over decoded as UTF-8, so a byte above 0x7E shows as a character above it; the
 * own engine refuses such bytes as it parses the request line.
 */
const NOT_TARGET = /[^\x21-\x7e]/;
const CLOSE_TOKEN = /(?:^|,)[ \t]*close[ \t]*(?:,|$)/i;
const KEEP_ALIVE_TOKEN = /(?:^|,)[ \t]*keep-alive[ \t]*(?:,|$)/i;

/**
 * Starts capturing a head. `path` starts with `/` (or is `*`); `query` is the part after `?`
 * ('' when none); `http10` for an HTTP/1.0 request.
 */
export function beginHead(method: string, path: string, query: string, http10: boolean): void {
  // HOT
  hostCount = 0;
  clCount = 0;
  teCount = 0;
  teValue = '';
  clValue = '';
  hostValue = '';
  xff = '';
  authCount = 0;
  authValue = '';
  apiKeyCount = 0;
  apiKeyValue = '';
  clientXfh = '';
  clientXfp = '';
  clientFwd = '';
  connection = '';
  targetAuthority = '';
  head.headers = [];
  head.requestId = null;
  head.headerBytes = 0;
  head.headerCount = 0;
  head.http10 = http10;
  head.expectContinue = false;
  head.framingError = null;
  head.method = method;
  head.path = path;
  head.url = query === '' ? path : `${path}?${query}`;
}

/** Takes the authority of an absolute-form request target; it stands for the Host. */
export function useTargetAuthority(authority: string): void {
  targetAuthority = authority;
}

/** Adds one header field; `name` is lower-case. */
export function addHeader(name: string, value: string): void {
  // HOT
  head.headerBytes += name.length + value.length + 4;
  head.headerCount++;
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
    case 'authorization':
      if (authCount++ === 0) authValue = value;
      head.headers.push(name, value);
      return;
    case 'x-api-key':
      if (apiKeyCount++ === 0) apiKeyValue = value;
      head.headers.push(name, value);
      return;
    // Kept aside: Sluice writes its own (a node that reads the first of two values, as Express's
    // `req.hostname` and `req.protocol` do, must not take the client's word for the host or
    // scheme), unless the listener trusts what is in front of it (`trust_forwarded`).
    case 'x-forwarded-host':
      if (clientXfh === '') clientXfh = value;
      return;
    case 'x-forwarded-proto':
      if (clientXfp === '') clientXfp = value;
      return;
    case 'forwarded':
      clientFwd = clientFwd === '' ? value : `${clientFwd}, ${value}`;
      return;
    case 'connection':
      connection = connection === '' ? value : `${connection}, ${value}`;
      return;
    case 'expect':
      head.expectContinue = value.toLowerCase() === '100-continue';
      return;
    default:
      if (REQUEST_NOT_FORWARDED.has(name)) return;
      head.headers.push(name, value);
  }
}

/**
 * Ends the capture: checks framing and Host (RFC 9112 §6.1, §6.3, §3.2) and adds the forwarding
 * headers. `remoteAddress` is the client IP as text; `proto` the scheme the client used
 * (`x-forwarded-proto`); `trustForwarded` keeps the client's X-Forwarded-Host, X-Forwarded-Proto
 * and Forwarded (a load balancer in front of Sluice set them). Returns the shared RequestHead;
 * read it before the handler returns.
 */
export function endHead(remoteAddress: string, proto = 'http', trustForwarded = false): RequestHead {
  // HOT
  if (clCount > 1) head.framingError = 'more than one Content-Length header';
  else if (teCount > 1) head.framingError = 'more than one Transfer-Encoding header';
  else if (teCount === 1 && head.http10) head.framingError = 'Transfer-Encoding in an HTTP/1.0 request';
  else if (teCount === 1 && teValue.trim().toLowerCase() !== 'chunked')
    head.framingError = 'Transfer-Encoding other than plain "chunked" is not accepted';
  else if (teCount === 1 && clCount === 1) head.framingError = 'both Content-Length and Transfer-Encoding';
  else if (hostCount > 1) head.framingError = 'more than one Host header';
  else if (hostCount === 0 && !head.http10) head.framingError = 'missing Host header';
  else if (!HOST.test(hostValue)) head.framingError = 'Host is not host[:port]';
  else if (targetAuthority !== '' && !HOST.test(targetAuthority))
    head.framingError = "the request target's authority is not host[:port]";
  // Sluice charges the first; a node reading the last would act for another tenant.
  else if (authCount > 1) head.framingError = 'more than one Authorization header';
  else if (apiKeyCount > 1) head.framingError = 'more than one x-api-key header';
  else if (apiKeyCount === 1 && authCount === 1) {
    const bearer = bearerKey(authValue);
    if (bearer !== undefined && bearer !== apiKeyValue.trim())
      head.framingError = 'Authorization and x-api-key carry different keys';
  }
  head.chunked = teCount === 1;
  head.contentLength = clCount === 1 ? Number(clValue) : -1;
  if (clCount === 1 && !CONTENT_LENGTH.test(clValue)) head.framingError = 'invalid Content-Length';

  const host = targetAuthority !== '' ? targetAuthority : hostValue;
  head.hostName = hostWithoutPort(host);
  head.closeAfter = head.http10;
  if (connection !== '') {
    if (CLOSE_TOKEN.test(connection)) head.closeAfter = true;
    else if (head.http10 && KEEP_ALIVE_TOKEN.test(connection)) head.closeAfter = false;
    const named = connectionTokens(connection);
    if (named !== null) removeNamed(head.headers, named);
  }
  if (trustForwarded && clientFwd !== '') head.headers.push('forwarded', clientFwd);
  head.headers.push('x-forwarded-for', xff === '' ? remoteAddress : `${xff}, ${remoteAddress}`);
  // An empty Host (allowed, RFC 9112 §3.2), one with an empty name (`:`, `:80`) or none (HTTP/1.0)
  // names no host to pass on.
  const forwardedHost = trustForwarded && clientXfh !== '' ? clientXfh : head.hostName === '' ? '' : host;
  if (forwardedHost !== '') head.headers.push('x-forwarded-host', forwardedHost);
  head.headers.push('x-forwarded-proto', trustForwarded && clientXfp !== '' ? clientXfp : proto);
  return head;
}

/**
 * Captures the head of a uWS request. `remoteAddress` is the client IP as text; `proto` the scheme
 * the client used. Returns the shared RequestHead; read it before the handler returns.
 */
export function captureHead(
  req: HttpRequest,
  remoteAddress: string,
  proto = 'http',
  trustForwarded = false,
): RequestHead {
  // HOT
  // The uWS build in use returns undefined (not '') when the URL has no query string; it refuses
  // HTTP/1.0 itself, so every request it hands over is HTTP/1.1.
  const query = req.getQuery() as string | undefined;
  const path = req.getUrl();
  beginHead(req.getCaseSensitiveMethod(), path, query ?? '', false);
  req.forEach(addHeader);
  endHead(remoteAddress, proto, trustForwarded);
  // Forwarded, such a target would reach the node re-encoded (é as the one byte 0xE9).
  if (NOT_TARGET.test(path) || (query !== undefined && NOT_TARGET.test(query)))
    head.framingError = 'invalid character in the request target';
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
