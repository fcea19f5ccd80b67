/**
 * The per-request session: the captured request, the plan it runs on, and the forwarding state
 * machine — route, choose a pool, pick a node, dispatch attempts (retries, a hedge), stream the
 * winner back, finish exactly once. Attempts (attempt.ts) report here; the session never touches
 * uWS objects (see Downstream) nor undici (see UpstreamNode).
 */
import { eligible, NO_NODES, type AffinityOutcome, type PickRequest } from '../balance/balance-policy.js';
import type { AffinitySource } from '../balance/affinity-key.js';
import { readPromptBlocks, type PromptBlocks } from '../balance/prompt-blocks.js';
import { stableHash26 } from '../balance/stable-hash.js';
import { recordTtfb } from '../balance/ttfb-ewma.js';
import type { StatsRegistry } from '../metrics/stats.js';
import type { Plan } from '../plan/plan.js';
import type { Pool } from '../pool/pool.js';
import type { TokenBudget } from '../pool/token-budget.js';
import type { Route } from '../route/route-table.js';
import type { UpstreamNode } from '../upstream/upstream-node.js';
import { Attempt } from './attempt.js';
import { nowMs } from './clock.js';
import type { Downstream } from './downstream.js';
import { Errors, SluiceError, errorBody, errorEvent, type ErrorKind } from './errors.js';
import {
  getFlat,
  isEventStream,
  plainTransferCoding,
  readResponseHead,
  withHeaders,
  type ResponseHead,
} from './headers.js';
import { HeldHead } from './held-head.js';
import { MirrorRequest } from './mirror.js';
import { AdmissionGate, type GateOwner } from './admission-gate.js';
import { requestDeadline, type AdmissionRejection } from '../admission/admission-ticket.js';
import type { RateLimitDecision } from '../ratelimit/rate-limit-decision.js';
import { rateLimitHeaders, rateLimitMessage, retryAfterHeaders } from '../ratelimit/rate-limit-headers.js';
import { estimateRequestTokens } from '../ratelimit/token-estimate.js';
import { extractApiKey } from '../tenant/api-key.js';
import type { Tenant } from '../tenant/tenant-table.js';
import { endsWithDone } from './stream-end.js';
import { BodyTail, parseUsageTokens } from './usage-tail.js';
import type { BatchItemSink } from '../batch/batch-item.js';
import { parseJsonBody } from './request-body.js';
import { backoffMs, retryAfterMs, retryBitForError, retryBitForStatus, statusReason } from './retry-rules.js';
import { classifyUpstreamError } from './upstream-errors.js';
import { SSE_EVENT_FOUND, scanSseForEvent } from './sse-first-event.js';
import type { DeadlineEntry, DeadlineList } from './deadline-list.js';
import {
  estimatesReport,
  firstTokenSample,
  headSample,
  settleAttemptPrefill,
  trackPrefill,
} from './prefill-tracking.js';
import type { LocalEndpoints, LocalWork } from './local-endpoints.js';
import { PluginRun } from '../plugin/plugin-run.js';
import { RequestRecord } from '../metrics/request-record.js';
import { Refusal, admissionRefusal, rateLimitRefusal } from '../metrics/refusals.js';

/** What a session needs from the server that owns it. */
export interface SessionHost {
  readonly stats: StatsRegistry;
  /** True while draining: every response closes its connection. */
  readonly draining: boolean;
  /** Called once per session, when it starts (after it was counted in flight). */
  sessionStarted(s: Session): void;
  /** Called exactly once per session, when it is finished. */
  sessionDone(s: Session): void;
  /** Endpoints answered in process (the batch API), or null. */
  readonly endpoints: LocalEndpoints | null;
}

/** Retry headers of a 503 for a pool without an available node (one second). */
const NO_NODE_RETRY_AFTER: readonly string[] = retryAfterHeaders(1000);
/**
 * Picks that may find their node's last slot taken by another worker thread before the request
 * counts as finding no node (each lost race leaves the node full, so the next pick passes it by).
 */
const MAX_LOST_RACES = 8;

/** Headers of Sluice's answer to `OPTIONS *` (none but the request id `respond` adds). */
const NO_HEADERS: readonly string[] = [];

/** Longest a dropped retryable answer's body is read before its exchange is cut, ms. */
const DISCARD_DRAIN_MS = 100;

/** Cuts a dropped retryable answer still being read: its error ends it, and the retry goes on. */
function cutDiscarded(att: Attempt): void {
  if (!att.released) att.abort(new Error('retryable answer dropped: its body took too long'));
}
/** Output tokens assumed, for load estimates, of a generation request that sets no max_tokens. */
const BALANCE_MAX_TOKENS = 256;
const UNPARSED = Symbol('unparsed');

export class Session implements PickRequest, AffinitySource, GateOwner, BatchItemSink, DeadlineEntry {
  readonly host: SessionHost;
  readonly plan: Plan;
  readonly downstream: Downstream;
  /** Request id (client's `x-request-id` when valid, else generated). */
  readonly id: string;
  /** Links in the server's list of the sessions in flight (live-sessions.ts). */
  livePrev: Session | null = null;
  liveNext: Session | null = null;
  /** Method as sent (upper-case for standard methods); a plugin's onRequest may change it. */
  method: string;
  /** Path without query string. */
  path: string;
  /** Path with query string, as forwarded. */
  url: string;
  /** Lower-case Host without port. */
  readonly hostName: string;
  /** Forwarded request headers, flat `[name, value, ...]`, lower-case names. */
  readonly headers: string[];
  /** Body bytes, or null when the request had none. */
  body: Buffer | null = null;
  /** Arrival time, ms (monotonic). */
  readonly startMs: number;
  /** The calling tenant's name ('' without tenants). */
  tenant = '';
  /** The calling tenant, when tenants are configured. */
  tenantInfo: Tenant | null = null;
  /**
   * True for a request Sluice makes itself (a batch item): no API key is checked; `tenantInfo` is
   * set by the caller (null: the anonymous tenant, if any).
   */
  internal = false;
  /** Admission class of the request, overriding the tenant's (batch jobs run at the lowest); null: the tenant's. */
  priorityClass: number | null = null;
  /** Work a local endpoint runs for this request, aborted if the client leaves. */
  local: LocalWork | null = null;
  /**
   * False for the main thread's copy of a request a worker thread passed on (runtime/
   * endpoint-relay.ts): the worker's session counts it, this one records nothing when it ends.
   */
  recorded = true;
  /** Index of the listener the request came in on (its plugins apply). */
  listener = 0;
  /** The plugin hook runner, on routes and listeners with plugins; else null. */
  plug: PluginRun | null = null;
  /** The rate-limit decision that admitted the request, when limits apply. */
  private limit: RateLimitDecision | null = null;
  /** The request's place in its pool's admission queue, when the pool has one. */
  private gate: AdmissionGate | null = null;
  /** The newest response chunk (a reference), scanned for `usage` at the end with `earlier`. */
  private newest: Buffer | null = null;
  /** The bytes before `newest`, from a response's second chunk on; null before. */
  private earlier: BodyTail | null = null;
  /** True once a micro-batch answered this request. */
  private batchAnswered = false;
  route: Route | null = null;
  /** The pool serving the request (after split and fallbacks). */
  pool: Pool | null = null;
  affinityKey: string | null = null;
  /** `stableHash26(affinityKey)`, computed on the first `affinityHash()` call for the key; -1 before. */
  private keyHash = -1;
  affinityOutcome: AffinityOutcome = 'none';
  /** Written by the policy on each pick (see PickRequest); copied to the attempt. */
  expectedTtftMs = -1;
  cachedTokens = -1;
  queuedMs = -1;
  stallMs = -1;
  /** Attempts dispatched so far. */
  attempts = 0;
  /** Status sent to the client (0 until decided; 499 when the client left). */
  status = 0;
  /** Status of the answer the client was given from a node (its head, or a micro-batch's item); 0 before. */
  private answerStatus = 0;
  private parsed: unknown = UNPARSED;
  private costTokens = 0;
  private promptCount = 0;
  /** The prompt's block hashes, computed on the first `promptBlocks()` call. */
  private blocks: PromptBlocks | null = null;
  /** The retry and hedge budgets the request deposited in, released when it finishes; null before. */
  private retryFund: TokenBudget | null = null;
  private hedgeFund: TokenBudget | null = null;
  /** Nodes earlier attempts used (null until a second pick needs it). */
  private tried: UpstreamNode[] | null = null;
  private first: Attempt | null = null;
  private second: Attempt | null = null;
  private winner: Attempt | null = null;
  private live = 0;
  private retries = 0;
  private fallbackIndex = 0;
  private hedged = false;
  /** True while a copy of the request is owed to the route's mirror pool (sent with the first attempt). */
  private mirrorDue = false;
  /** True once an attempt was handed to a node's connection pool (a node may have seen the request). */
  private dispatched = false;
  /** A plugin answered the request itself (`respond`). */
  private pluginAnswered = false;
  private lastError: SluiceError | null = null;
  /**
   * The attempt whose retryable answer was dropped last (its `kept` head and body), passed on as the
   * failure when no retry follows; null when the last failure was of another kind.
   */
  private dropped: Attempt | null = null;
  /**
   * The pool whose retry budget granted a retry not dispatched yet: the retry is counted there when
   * its attempt goes out, and the token goes back when none does (no node, the request ended).
   */
  private retryPool: Pool | null = null;
  /** The route's total-timeout deadline (see deadline-list.ts): monotonic ms and list links. */
  deadlineAt = 0;
  dlPrev: DeadlineEntry | null = null;
  dlNext: DeadlineEntry | null = null;
  dlList: DeadlineList | null = null;
  private retryTimer: NodeJS.Timeout | null = null;
  private hedgeTimer: NodeJS.Timeout | null = null;
  private sse = false;
  /** True once the request is finished (exactly once). */
  finished = false;
  /** Metrics, access log and trace of this request. */
  readonly rec: RequestRecord;

  constructor(
    host: SessionHost,
    plan: Plan,
    downstream: Downstream,
    id: string,
    method: string,
    path: string,
    url: string,
    hostName: string,
    headers: string[],
  ) {
    this.host = host;
    this.plan = plan;
    this.downstream = downstream;
    this.id = id;
    this.method = method;
    this.path = path;
    this.url = url;
    this.hostName = hostName;
    this.headers = headers;
    this.startMs = nowMs();
    this.rec = new RequestRecord(host.stats, this);
  }

  /** Value of a forwarded request header (lower-case name), or undefined. */
  header(name: string): string | undefined {
    const h = this.headers;
    for (let i = 0; i < h.length; i += 2) if (h[i] === name) return h[i + 1];
    return undefined;
  }

  /** The parsed JSON body, or null (no body, or not JSON). Parsed at most once, on demand. */
  json(): unknown {
    if (this.parsed === UNPARSED) this.parsed = parseJsonBody(this.body);
    return this.parsed;
  }

  /**
   * True when the request says its body is JSON (`application/json`, `*+json`, or no content type,
   * as OpenAI clients' bodies always are) and it does not parse as JSON. Other bodies (uploads,
   * NDJSON, compressed bodies) carry no JSON Sluice could count and are not judged.
   */
  private unreadableBody(): boolean {
    const body = this.body;
    if (body === null || body.length === 0 || this.json() !== null) return false;
    if (this.header('content-encoding') !== undefined) return false;
    const type = this.header('content-type');
    if (type === undefined) return true;
    const media = (type.indexOf(';') < 0 ? type : type.slice(0, type.indexOf(';'))).trim().toLowerCase();
    return media === 'application/json' || media.endsWith('+json');
  }

  /** The body's JSON `model` field, or null. */
  model(): string | null {
    const v = this.json();
    if (typeof v !== 'object' || v === null) return null;
    const m = (v as { model?: unknown }).model;
    return typeof m === 'string' ? m : null;
  }

  /** Estimated work of the request in tokens (prompt + max_tokens), at least 1; computed once. */
  get cost(): number {
    if (this.costTokens === 0) {
      const e = estimateRequestTokens(this.json(), BALANCE_MAX_TOKENS);
      const c = e.prompt + e.maxTokens;
      this.costTokens = c >= 1 ? c : 1;
      this.promptCount = e.prompt >= 1 ? e.prompt : 1;
    }
    return this.costTokens;
  }

  /** Estimated prompt tokens of the request (its prefill work), at least 1; computed with `cost`. */
  get promptTokens(): number {
    if (this.costTokens === 0) void this.cost;
    return this.promptCount;
  }

  /** The prompt's block hashes for cache-aware balancing (see PickRequest), computed once. */
  promptBlocks(): PromptBlocks {
    return (this.blocks ??= readPromptBlocks(this.json()));
  }

  /** The affinity key's ring hash (see PickRequest), computed once per key. */
  affinityHash(): number {
    // HOT
    if (this.keyHash < 0) this.keyHash = this.affinityKey === null ? 0 : stableHash26(this.affinityKey);
    return this.keyHash;
  }

  /** Runs the request once its body is complete. */
  run(): void {
    // HOT
    // `OPTIONS *` (the own engine's asterisk-form) asks about the server, not a resource a node
    // holds: a 200 without content (RFC 9110 §9.3.7), before any plugin or route sees it.
    if (this.path === '*') {
      this.respond(200, NO_HEADERS, '');
      return;
    }
    const endpoints = this.host.endpoints;
    if (endpoints !== null && endpoints.owns(this.path)) {
      endpoints.handle(this);
      return;
    }
    const pre = this.plan.preRoute;
    if (pre !== null) {
      const hooks = pre[this.listener];
      if (hooks != null && !PluginRun.preRoute(this, hooks)) return;
    }
    this.routeRequest();
  }

  /** Matches the route, then runs the route's plugins' onRequest hooks (if any). */
  routeRequest(): void {
    // HOT
    const route = this.plan.routes.match(this);
    if (route === null) {
      const hint = this.body !== null && this.json() === null ? ' (the body is not valid JSON)' : '';
      const model = this.model();
      if (model !== null && this.plan.routes.refusedForModel(this)) {
        this.rec.onRefused(this, Refusal.routeNotFound, Errors.modelNotFound.id);
        const shown = model.length > 256 ? `${model.slice(0, 256)}…` : model;
        this.fail(Errors.modelNotFound, `The model \`${shown}\` does not exist or is not served here.`);
        return;
      }
      this.rec.onRefused(this, Refusal.routeNotFound, Errors.routeNotFound.id);
      this.fail(Errors.routeNotFound, `no route matches ${this.method} ${this.path}${hint}`);
      return;
    }
    this.route = route;
    const chains = route.plugins;
    if (chains !== null) {
      const chain = chains[this.listener];
      if (chain != null && !PluginRun.enterRoute(this, chain)) return;
    }
    this.authenticate();
  }

  /** Authenticates the tenant (unless a plugin named it) and checks its rate limits, then admits. */
  authenticate(): void {
    // HOT
    const route = this.route!;
    const tp = this.plan.tenants;
    if (tp.table !== null) {
      let t =
        this.internal || this.tenantInfo !== null
          ? (this.tenantInfo ?? tp.table.authenticate(undefined, true))
          : tp.table.authenticate(extractApiKey(this), route.allowAnonymous);
      // A batch item of an anonymous caller reaches only the routes anonymous callers may use.
      if (t !== null && this.internal && t.anonymous && !route.allowAnonymous) t = null;
      if (!this.useTenant(t)) return;
      const limits = tp.limits[t.index];
      if (tp.limiter !== null && limits !== undefined) {
        if (this.unreadableBody()) {
          // Its tokens and model cannot be counted, while a node may well read it (NaN, UTF-16):
          // forwarding it uncharged would let a limited tenant past its token and model limits.
          this.host.stats.countRejected(Errors.invalidRequest.id);
          this.fail(
            Errors.invalidRequest,
            'The request body is not valid JSON. Send a JSON object encoded in UTF-8 (no NaN or Infinity).',
          );
          return;
        }
        const e = estimateRequestTokens(this.json(), tp.defaultMaxTokens);
        const d = tp.limiter.check(limits, this.model(), e.prompt + e.maxTokens);
        if (d instanceof Promise) {
          // The Redis store answers asynchronously (within its timeout); the client may leave meanwhile.
          d.then(
            (decision) => {
              if (this.onLimitDecision(decision)) this.admit();
            },
            (e: unknown) => this.fail(Errors.internal, `rate limit check failed: ${String(e)}`),
          );
          return;
        }
        if (!this.onLimitDecision(d)) return;
      }
    }
    this.admit();
  }

  /**
   * Makes `t` the calling tenant; with null, answers 401 `invalid_api_key` and returns false.
   * Shared by routes and the local endpoints.
   */
  useTenant(t: Tenant | null): t is Tenant {
    if (t === null) {
      this.rec.onRefused(this, Refusal.invalidApiKey, Errors.invalidApiKey.id);
      this.fail(
        Errors.invalidApiKey,
        'Incorrect or missing API key. Send it as "Authorization: Bearer <key>".',
      );
      return false;
    }
    this.tenantInfo = t;
    this.tenant = t.name;
    return true;
  }

  /** Applies a rate-limit decision; false when the request was refused (answered). */
  private onLimitDecision(d: RateLimitDecision): boolean {
    const limiter = this.plan.tenants.limiter!;
    if (this.finished) {
      // The client left while the store answered: give back what an admission took.
      if (d.allowed) limiter.refund(d);
      return false;
    }
    if (!d.allowed) {
      const kind =
        d.reason === 'tokens'
          ? Errors.rateLimitTokens
          : d.reason === 'unavailable'
            ? Errors.rateLimitUnavailable
            : d.reason === 'concurrency'
              ? Errors.rateLimitConcurrency
              : Errors.rateLimitRequests;
      this.rec.onRefused(this, rateLimitRefusal(d.reason), kind.id);
      this.fail(kind, rateLimitMessage(d), rateLimitHeaders(d));
      return false;
    }
    this.limit = d;
    return true;
  }

  /** Runs the onRoute hooks, chooses the pool and passes its admission control, then dispatches. */
  admit(): void {
    // HOT
    const p = this.plug;
    if (p !== null && !p.routeDone && !p.routeHooks()) return;
    const route = this.route!;
    const pool = p !== null && p.pool_ !== null ? p.pool_ : route.choosePool(this);
    this.usePool(pool);
    const state = pool.state;
    const ctl = state.admission;
    if (ctl !== null) {
      const a = state.admissionSettings!;
      const t = this.tenantInfo;
      const now = nowMs();
      const gate = new AdmissionGate(
        this,
        ctl,
        this.tenant,
        t === null ? 1 : t.weight,
        this.priorityClass ?? (t === null ? 0 : t.priority),
        requestDeadline(this.header('x-request-deadline-ms'), now, a.defaultDeadlineMs, a.maxDeadlineMs),
        a.fairTokens ? this.cost : 1,
        now,
      );
      this.gate = gate;
      const r = ctl.offer(gate);
      if (r === 'queued') return;
      if (r !== 'admitted') {
        this.onAdmissionRejected(r);
        return;
      }
      gate.admit();
    }
    this.dispatchFirst();
  }

  /** A queued request got its slot. */
  onAdmitted(): void {
    if (this.finished) return;
    this.gate?.admit();
    this.dispatchFirst();
  }

  /** Admission turned the request away (queue full, waited too long, deadline passed). */
  onAdmissionRejected(r: AdmissionRejection): void {
    const kind = r.reason === 'deadline' ? Errors.deadlineExceeded : Errors.overloaded;
    this.rec.onRefused(this, admissionRefusal(r.reason), kind.id);
    const message =
      r.reason === 'deadline'
        ? 'The request deadline passed before a GPU node could take it.'
        : `Pool ${this.pool!.name} is overloaded (${r.reason}); retry after ${Math.ceil(r.retryAfterMs)} ms.`;
    this.fail(kind, message, retryAfterHeaders(r.retryAfterMs));
  }

  private dispatchFirst(): void {
    // HOT
    const route = this.route!;
    const state = this.pool!.state;
    // Released in finish (a reload may replace the pool's budgets meanwhile: these are the ones paid).
    this.retryFund = state.retryBudget;
    this.retryFund.deposit();
    this.hedgeFund = state.hedgeBudget;
    this.hedgeFund?.deposit();
    if (route.deadlines !== null) route.deadlines.add(this, nowMs());
    // Requests without a body to combine (GET /v1/models on a batching route), and on a prefix
    // route those to another path than the batch calls', go alone, as sent.
    const batcher = this.method === 'POST' ? route.batcherFor(this.pool!, this.path) : null;
    if (batcher !== null) {
      const body = this.json();
      if (typeof body !== 'object' || body === null || Array.isArray(body)) {
        this.rec.onRefused(this, Refusal.invalidRequest, Errors.invalidRequest.id);
        this.fail(Errors.invalidRequest, 'the request body must be a JSON object');
        return;
      }
      // A stream is forwarded as it is: a micro-batch answers with whole bodies, which would hold
      // the events back until the last one and send them as JSON.
      // A body the codec cannot combine (an embeddings input that is empty or of another shape)
      // goes to a node alone, as sent: the node's own answer says what is wrong with it.
      if ((body as { stream?: unknown }).stream !== true && batcher.accepts(body)) {
        // The batcher answers through onBatchResult, exactly once.
        batcher.submit(body, this, 0, this.body);
        return;
      }
    }
    const mirror = route.mirror;
    this.mirrorDue = mirror !== null && Math.random() < mirror.share;
    this.startAttempt(false);
  }

  private usePool(pool: Pool): void {
    this.pool = pool;
    this.affinityKey = pool.affinity === null ? null : pool.affinity(this);
    this.keyHash = -1;
  }

  /** Picks a node (falling back to the route's fallback pools) and dispatches an attempt. */
  private startAttempt(hedge: boolean): void {
    // HOT
    const route = this.route!;
    const tried = this.attempts === 0 ? NO_NODES : this.triedNodes();
    let node: UpstreamNode | null = null;
    let cost = 0;
    for (let race = 0; ; race++) {
      node = this.pool!.pick(this, tried);
      while (node === null && !hedge && this.fallbackIndex < route.fallback.length) {
        this.pool!.state.noNode++;
        const next = route.fallback[this.fallbackIndex++]!;
        next.state.fellBack++;
        this.usePool(next);
        node = next.pick(this, tried);
      }
      if (node === null) break;
      // Tokens are estimated (the JSON body parsed) only for a pool whose policy weighs them.
      cost = this.pool!.policy.weighsCost ? this.cost : 0;
      if (node.tryAddLoad(cost)) break;
      // Another worker thread took the node's last slot (max_in_flight_per_node) between the pick
      // and now; the node reads full now, so the next pick passes it by.
      if (race === MAX_LOST_RACES) {
        node = null;
        break;
      }
    }
    if (node === null) {
      if (hedge) return;
      if (this.attempts === 0) this.pool!.state.noNode++;
      const e = this.lastError;
      if (this.dropped !== null) this.passOnDropped(this.dropped);
      else if (e !== null) this.fail(e.kind, e.message, e.headers);
      else {
        this.rec.onRefused(this, Refusal.noHealthyNode, Errors.noHealthyNode.id);
        this.fail(
          Errors.noHealthyNode,
          `pool ${this.pool!.name} has no node available for the request`,
          NO_NODE_RETRY_AFTER,
        );
      }
      return;
    }
    const now = nowMs();
    const att = new Attempt(this, node, ++this.attempts, hedge, now, cost);
    const paid = this.retryPool;
    if (paid !== null) {
      paid.state.retries++;
      this.retryPool = null;
    }
    if (this.first === null || this.first.released) this.first = att;
    else this.second = att;
    this.live++;
    if (this.tried !== null) this.tried.push(node);
    node.attempts++;
    trackPrefill(att, this.pool!, this);
    const p = this.plug;
    if (p !== null && !p.upstreamHooks(att)) return;
    this.dispatchAttempt(att);
  }

  /** Sends an attempt to its node (after the onUpstreamRequest hooks, if any). */
  dispatchAttempt(att: Attempt): void {
    // HOT
    if (this.finished) {
      this.releaseAttempt(att);
      return;
    }
    const p = this.plug;
    const sent = p === null ? this.headers : p.upstreamHeaders();
    const body = p === null ? this.body : p.upstreamBody();
    // The shadow copy goes out with the first attempt, as that attempt's hooks left it, with the
    // mirror pool's own request_headers in place of this pool's.
    if (this.mirrorDue) this.sendMirror(sent, body);
    const extra = this.pool!.requestHeaders;
    const headers = extra === null ? sent : withHeaders(sent, extra);
    if (this.rec.trace !== null) this.rec.onAttemptStart(att, headers);
    // The node asked last, until one answers (onHead): a request no node answered is logged with it.
    this.rec.node = att.node;
    // The attempt keeps its own time-to-first-byte and body-gap deadlines (attempt.ts): undici's
    // are off (0).
    const route = this.route!;
    this.dispatched = true;
    att.sent = true;
    att.watch(route.ttfbDeadlines, route.idleDeadlines, nowMs());
    att.node.dispatch(
      {
        method: this.method,
        path: this.url,
        headers,
        body,
        ttfbMs: 0,
        idleMs: 0,
      },
      att,
    );
    // A dispatch that failed synchronously already ran attemptError (and maybe finished).
    if (att.released || this.finished) return;
    // Only the first attempt is hedged, once; retries wait for their own answer.
    const state = this.pool!.state;
    if (this.attempts === 1 && this.hedgeTimer === null && state.hedge !== null) {
      const body = this.json();
      const stream =
        typeof body === 'object' && body !== null && (body as { stream?: unknown }).stream === true;
      const delay = state.hedgeDelayMs(stream);
      if (delay >= 0) this.hedgeTimer = setTimeout(onHedgeTimer, delay, this);
    }
  }

  private sendMirror(headers: string[], body: Buffer | null): void {
    this.mirrorDue = false;
    const route = this.route!;
    const mirror = route.mirror!;
    MirrorRequest.send(
      this.plan,
      mirror.pool,
      this,
      headers,
      body,
      mirror.stats,
      route.timeouts.ttfbMs,
      route.timeouts.idleMs,
    );
  }

  private triedNodes(): readonly UpstreamNode[] {
    if (this.tried === null) {
      this.tried = [];
      if (this.first !== null) this.tried.push(this.first.node);
      if (this.second !== null) this.tried.push(this.second.node);
    }
    return this.tried;
  }

  /**
   * The hedge delay passed with the first attempt still without a winner: no head yet, or (a
   * stream) a head but no first event. When no hedge can be sent, a held stream goes out now.
   */
  onHedgeTimer(): void {
    this.hedgeTimer = null;
    if (this.finished || this.hedged || this.winner !== null || this.live !== 1) return;
    const state = this.pool!.state;
    if (state.hedgeBudget !== null && state.hedgeBudget.tryWithdraw(nowMs())) {
      this.hedged = true;
      const before = this.attempts;
      this.startAttempt(true);
      if (this.attempts > before) {
        state.hedges++;
        return;
      }
    }
    const a = this.first;
    if (a !== null && a.held !== null) this.commitHeld(a);
  }

  // ---- attempt events (from Attempt, the undici handler) ----

  attemptHead(att: Attempt, status: number, rawHeaders: Buffer[]): void {
    // HOT
    if (this.finished || att.cancelled) return;
    const now = nowMs();
    att.headMs = now;
    const ttfb = now - att.startMs;
    const pool = this.pool!;
    const state = pool.state;
    const head = readResponseHead(rawHeaders, this.id);
    if (!plainTransferCoding(head.transferEncoding)) {
      // undici runs attemptError (the upstream exchange is aborted, its connection destroyed).
      att.abort(
        new SluiceError(
          Errors.upstreamProtocol,
          `upstream node answered with Transfer-Encoding "${head.transferEncoding}"; only chunked is passed on`,
        ),
      );
      return;
    }
    const bit = retryBitForStatus(status);
    // A busy node's 429 is not a sign of a broken node; 5xx is.
    if (status >= 500) state.health?.recordFailure(att.node, statusReason(status));
    else state.health?.recordSuccess(att.node);
    if (bit !== 0 && (this.live > 1 || (this.hasAlternative(att.node) && this.mayRetry(bit)))) {
      // Drain and drop this answer: either the other attempt (a hedge) may still succeed, or a
      // retry starts when this body ends. A fast error is not a response time: no TTFB sample.
      att.discard = true;
      att.retryBit = bit;
      att.retryPlanned = this.live === 1;
      att.retryAfterMs = retryAfterMs(head.retryAfter, this.route!.retries.maxRetryAfterMs);
      // Kept (bounded) for when no node takes the retry after all: the client then gets this answer.
      att.kept = new HeldHead(status, head);
      if (att.retryPlanned) this.clearHedgeTimer();
      // Drained so the connection can serve again, but not for long: a body that trickles or
      // stalls must not hold the retry (or the client) back until the idle or total timeout.
      setTimeout(cutDiscarded, DISCARD_DRAIN_MS, att);
      return;
    }
    const sse = isEventStream(head.contentType);
    // Its head says nothing of the prefill: the first-byte deadline runs on to the first event
    // (when the route has one; without it the body-gap deadline starts at the head, as before).
    if (sse && status < 300 && att.dlList !== null) att.awaitFirstEvent = true;
    if (bit === 0) {
      recordTtfb(att.node, ttfb, now, pool.ttfbHalfLifeMs);
      // A stream's head comes before its prefill: its sample is its first event (firstTokenSample).
      if (!sse) headSample(att, pool, now);
    }
    // While a hedge may still be sent or is running, a stream wins with its first event, not its
    // head: the head waits so that the client sees nothing of an attempt that may yet lose.
    if (sse && status < 300 && (this.hedgeTimer !== null || this.live > 1)) {
      att.held = new HeldHead(status, head);
      return;
    }
    this.commit(att, status, head);
  }

  /** Makes `att` the winner: cancels the other attempt and sends its head (`head` as read). */
  private commit(att: Attempt, status: number, head: ResponseHead): void {
    // HOT
    this.winner = att;
    if (att.hedge) this.pool!.state.hedgeWins++;
    this.cancelOthers(att);
    this.sendHead(att, status, head);
  }

  /** Sends the head of the winner `att` downstream (through the plugins, if any). */
  private sendHead(att: Attempt, status: number, head: ResponseHead): void {
    // HOT
    const ttfb = att.headMs - att.startMs;
    this.route!.stats.ttfb.recordMs(ttfb);
    this.rec.onHead(this, att.node, ttfb);
    this.sse = isEventStream(head.contentType);
    const length = head.contentLength !== '' && !this.sse ? Number(head.contentLength) : -1;
    // An answer to the client's HEAD has no body either: the downstream knows the client's method
    // (a plugin may forward another) and applies it to every answer it writes.
    const noBody = status === 204 || status === 304;
    this.status = status;
    this.answerStatus = status;
    const out = head.headers;
    if (this.limit !== null) rateLimitHeaders(this.limit, out);
    if (this.route!.routeHeader) out.push('x-sluice-route', this.routeReport(att));
    // While draining, the connection closes after this answer, and the client is told so.
    if (this.host.draining) {
      out.push('connection', 'close');
      this.downstream.closeWhenDone();
    }
    const p = this.plug;
    if (p !== null) {
      p.responseHead(att, status, out, Number.isFinite(length) ? length : -1, noBody, head.binary);
      return;
    }
    this.downstream.start(status, out, Number.isFinite(length) ? length : -1, noBody, head.binary);
  }

  /** A body chunk of `att`, read at `now` (monotonic ms). */
  attemptData(att: Attempt, chunk: Buffer, now: number): void {
    // HOT
    if (att !== this.winner || this.finished) {
      if (att.held !== null && this.winner === null && !this.finished) this.heldData(att, chunk);
      else if (att.kept !== null && !att.kept.full()) att.kept.add(chunk);
      return;
    }
    if (this.sse) {
      if (att.firstTokenMs < 0) this.scanFirstToken(att, chunk);
      else this.rec.onChunk(now);
    }
    this.forward(att, chunk);
  }

  /**
   * True when the winner's stream reached the client up to a dispatched `data: [DONE]`
   * (stream-end.ts). Not on routes with plugins: what they passed on, or still hold, is not what the
   * node sent, and a plugin's own failure must end the request as one.
   */
  private streamAnswered(): boolean {
    return (
      this.plug === null && this.sse && this.downstream.started && endsWithDone(this.earlier, this.newest)
    );
  }

  /** Sends a chunk of the winner downstream (through the plugins, if any). */
  private forward(att: Attempt, chunk: Buffer): void {
    // HOT
    const prev = this.newest;
    if (prev !== null) (this.earlier ??= new BodyTail()).keep(prev);
    this.newest = chunk;
    if (this.plug !== null) {
      // The plugins' output is what goes out: counted as it is written (PluginRun.emit).
      this.plug.responseBody(att, chunk);
      return;
    }
    this.rec.bytes += chunk.length;
    if (!this.downstream.write(chunk)) att.pause();
  }

  /** Looks for the first event of a streamed answer in `chunk`; records time to first token once. */
  private scanFirstToken(att: Attempt, chunk: Buffer): void {
    // HOT
    const s = scanSseForEvent(chunk, att.sseScan);
    if (s !== SSE_EVENT_FOUND) {
      att.sseScan = s;
      return;
    }
    // One sample of the first event: the node's learned rate and the pool's hedging window read
    // it from dispatch; the route's and the observability series' histograms from arrival, once
    // the attempt is the winner (a held stream becomes it just below, in heldData).
    const now = nowMs();
    att.firstTokenMs = now;
    att.firstEvent(now);
    firstTokenSample(att, this.pool!, now);
    if (att === this.winner) this.firstTokenOut(now);
  }

  /** The winner's first event went out at `nowMs`: time to first token as the client saw it. */
  private firstTokenOut(nowMs: number): void {
    // HOT
    this.route!.stats.ttft.recordMs(nowMs - this.startMs);
    this.rec.onFirstToken(this, nowMs);
  }

  /** A chunk of a held stream: bytes before its first event wait; the first event makes it the winner. */
  private heldData(att: Attempt, chunk: Buffer): void {
    const h = att.held!;
    h.add(chunk);
    this.scanFirstToken(att, chunk);
    // Bytes that are no event (keep-alives) are held only up to a bound; then the stream goes out.
    if (att.firstTokenMs >= 0 || h.full()) this.commitHeld(att);
  }

  /** Makes a held stream the winner: sends its head and the bytes it held back. */
  private commitHeld(att: Attempt): void {
    const h = att.held!;
    att.held = null;
    this.commit(att, h.status, h);
    if (att.firstTokenMs >= 0) this.firstTokenOut(att.firstTokenMs);
    for (const chunk of h.chunks) if (!this.finished) this.forward(att, chunk);
  }

  attemptEnd(att: Attempt): void {
    this.releaseAttempt(att);
    if (this.finished) return;
    // A held stream that ended before any event is a complete answer all the same.
    if (att.held !== null && this.winner === null) {
      this.commitHeld(att);
      if (this.finished) return;
    }
    if (att === this.winner) {
      this.endAnswer();
      return;
    }
    if (att.kept !== null) att.kept.ended = true;
    if (att.discard && this.live === 0) this.afterDiscard(att);
  }

  /** The winner's body is complete: the plugins' chunk hooks end it, or it ends here. */
  private endAnswer(): void {
    if (this.plug !== null) {
      this.plug.responseBody(null, null);
      return;
    }
    this.downstream.end();
    this.finish();
  }

  /**
   * Every attempt is over and the last one was a dropped retryable answer: retry, or give up with
   * that answer when the retry has nowhere to go (checked now: a node may have left meanwhile).
   */
  private afterDiscard(att: Attempt): void {
    this.dropped = att;
    if (this.hasAlternative(att.node) && (att.retryPlanned || this.mayRetry(att.retryBit))) {
      this.scheduleRetry(att.retryAfterMs);
      return;
    }
    this.passOnDropped(att);
  }

  /**
   * Gives up after the dropped retryable answer of `att` (no retry follows, or the retry found no
   * node): the client gets the node's answer as the node sent it when it was kept whole; else (its
   * body was cut, broke or passed HELD_MAX_BYTES) the node's status and Retry-After with a body
   * saying so.
   */
  private passOnDropped(att: Attempt): void {
    const kept = att.kept!;
    if (kept.ended && !kept.full()) {
      this.winner = att;
      this.sendHead(att, kept.status, kept);
      for (const chunk of kept.chunks) if (!this.finished) this.forward(att, chunk);
      if (!this.finished) this.endAnswer();
      return;
    }
    const ra = kept.retryAfter;
    this.fail(
      Errors.upstreamStatus,
      `upstream node answered ${kept.status}; its body was not read in full`,
      ra === undefined ? [] : ['retry-after', ra],
      kept.status,
    );
  }

  attemptError(att: Attempt, err: Error): void {
    const wasCancelled = att.cancelled;
    this.releaseAttempt(att);
    if (this.finished || wasCancelled) return;
    const e = err instanceof SluiceError ? err : classifyUpstreamError(err);
    // Only the node's own failures count against it (not a request the client made unsendable),
    // and a drained retryable answer was already counted at its head; nor does a node that kept a
    // stream open after its `[DONE]`.
    if (e.kind.source === 'upstream' && !att.discard && !(att === this.winner && this.streamAnswered())) {
      att.node.failures++;
      this.pool!.state.health?.recordFailure(att.node, e.kind.code);
    }
    if (att === this.winner) {
      if (this.retryAfterHead(att, e)) return;
      this.endAfterHead(e);
      return;
    }
    if (att.discard) {
      // The retryable answer broke while being drained (or was cut, see cutDiscarded): go on as
      // planned, with its status as the error should no retry follow.
      if (this.live === 0) this.afterDiscard(att);
      return;
    }
    this.lastError = e;
    this.dropped = null;
    if (this.live > 0) return; // the other attempt (hedge) may still answer
    const bit = retryBitForError(e.kind);
    if (bit !== 0 && this.hasAlternative(att.node) && this.mayRetry(bit)) {
      this.scheduleRetry(0);
      return;
    }
    this.fail(e.kind, e.message, e.headers);
  }

  /**
   * The winner broke after its head but before any byte of its answer reached the client (the head
   * is still kept: a stream's node sends it before the prefill, then may crash): a retryable
   * failure goes to another node, as one before the head does. True when a retry was scheduled;
   * false leaves the answer to `endAfterHead` (a clean error reply when the head was given up).
   * Not with plugins, whose response hooks already saw this head.
   */
  private retryAfterHead(att: Attempt, e: SluiceError): boolean {
    // Only a stream's head comes before the work: an answer that is not streamed has its head
    // after the whole generation, which a retry would run a second time.
    if (this.plug !== null || this.finished || !this.sse || e.kind.source !== 'upstream') return false;
    const bit = retryBitForError(e.kind);
    const r = this.route!.retries;
    if (bit === 0 || (r.on & bit) === 0 || this.retries >= r.max || !this.hasAlternative(att.node))
      return false;
    if (!this.downstream.abandonHead()) return false;
    this.winner = null;
    // The retry's head sets these again; until then the request belongs to no node's series.
    this.rec.series = null;
    this.status = 0;
    this.answerStatus = 0;
    this.sse = false;
    this.lastError = e;
    this.dropped = null;
    if (!this.mayRetry(bit)) return false;
    this.scheduleRetry(0);
    return true;
  }

  /** Releases the node counters an attempt holds (exactly once). */
  private releaseAttempt(att: Attempt): void {
    if (att.released) return;
    att.released = true;
    settleAttemptPrefill(att);
    this.live--;
    // A request undici still holds keeps its node busy until undici lets go (Attempt.onError).
    if (!att.heldByUndici) att.releaseNode();
    if (this.rec.trace !== null) this.rec.onAttemptEnd(att);
  }

  private cancelOthers(winner: Attempt): void {
    this.clearHedgeTimer();
    const a = this.first;
    const b = this.second;
    if (a !== null && a !== winner && !a.released) a.cancel(new Error('another attempt answered first'));
    if (b !== null && b !== winner && !b.released) b.cancel(new Error('another attempt answered first'));
  }

  private clearHedgeTimer(): void {
    if (this.hedgeTimer !== null) {
      clearTimeout(this.hedgeTimer);
      this.hedgeTimer = null;
    }
  }

  /**
   * True when a retry has somewhere to go: an eligible node other than `current` and the nodes
   * already tried, in the pool or a fallback pool still ahead. Without one, the failure is passed
   * on as it is rather than spending the retry budget.
   */
  private hasAlternative(current: UpstreamNode): boolean {
    const tried = this.triedNodes();
    const route = this.route!;
    for (
      let p: Pool | undefined = this.pool!, i = this.fallbackIndex;
      p !== undefined;
      p = route.fallback[i++]
    ) {
      for (const m of p.members) {
        if (m.weight > 0 && m.node !== current && eligible(m.node) && !tried.includes(m.node)) return true;
      }
    }
    return false;
  }

  /** True when a failure of kind `bit` may be retried now (also takes a retry-budget token). */
  private mayRetry(bit: number): boolean {
    const r = this.route!.retries;
    if ((r.on & bit) === 0 || this.retries >= r.max || this.downstream.started) return false;
    if (!this.pool!.state.retryBudget.tryWithdraw(nowMs())) return false;
    this.retryPool = this.pool;
    return true;
  }

  private scheduleRetry(retryAfter: number): void {
    this.retries++;
    const r = this.route!.retries;
    const delay = Math.max(backoffMs(this.retries, r.baseBackoffMs, r.maxBackoffMs), retryAfter);
    this.retryTimer = setTimeout(onRetryTimer, delay, this);
  }

  /** The backoff before a retry ended. */
  onRetryTimer(): void {
    this.retryTimer = null;
    if (!this.finished) this.startAttempt(false);
  }

  private routeReport(att: Attempt): string {
    const pool = this.pool!;
    return `pool=${pool.name}; policy=${pool.policy.kind}; node=${att.node.id}; attempt=${this.attempts}; affinity=${this.affinityOutcome}${estimatesReport(att)}${att.hedge ? '; hedge' : ''}`;
  }

  /** The micro-batch carrying this request answered (or gave up on) its item. */
  onBatchResult(_tag: number, status: number, body: Buffer, attempts: number): void {
    if (this.finished) return;
    this.batchAnswered = true;
    this.attempts = attempts;
    this.status = status;
    this.answerStatus = status;
    this.newest = body;
    const headers = ['content-type', 'application/json', 'x-request-id', this.id];
    if (this.limit !== null) rateLimitHeaders(this.limit, headers);
    // No node saw the item (none could be picked): as for any request Sluice refuses that way.
    if (status === 503 && attempts === 0) headers.push(...NO_NODE_RETRY_AFTER);
    if (this.route!.routeHeader) {
      // A micro-batch answer: one call (or several, retried) carried it with other requests.
      const pool = this.pool!;
      headers.push(
        'x-sluice-route',
        `pool=${pool.name}; policy=${pool.policy.kind}; batched; attempt=${attempts}`,
      );
    }
    this.rec.bytes += body.length;
    this.plug?.batchAnswered(body);
    this.downstream.reply(status, headers, body, this.host.draining);
    this.finish();
  }

  /**
   * The main thread declined this request's item (server.workers: it has no batcher for the route
   * now, a reload removed it): the request goes to a node alone, as on a route without batching.
   */
  onBatchDeclined(_tag: number): void {
    if (this.finished) return;
    const mirror = this.route!.mirror;
    this.mirrorDue = mirror !== null && Math.random() < mirror.share;
    this.startAttempt(false);
  }

  /** The micro-batcher sent this request's item (submitted and sent at these monotonic ms) in a batch of `size`. */
  onBatchWindow(submittedMs: number, sentMs: number, size: number): void {
    this.rec.onBatchWindow(submittedMs, sentMs, size);
  }

  // ---- downstream events (called by the server adapter) ----

  /** The request body is complete (null when empty): run the request. */
  onBody(body: Buffer | null): void {
    this.body = body;
    this.run();
  }

  /** The body exceeded the listener's limit. */
  onBodyTooLarge(): void {
    this.rec.onRefused(this, Refusal.bodyTooLarge, Errors.bodyTooLarge.id);
    this.fail(Errors.bodyTooLarge, 'request body exceeds the size limit');
  }

  /** The client can take more bytes: resume the upstream body. */
  onDownstreamDrain(): void {
    this.winner?.resume();
  }

  /** The client disconnected: abort upstream attempts and release everything. */
  onDownstreamAborted(): void {
    if (this.finished) return;
    // A client that leaves while still sending its body has no route yet (routing reads the body).
    // The main thread's copy of a worker's request is counted by the worker's session.
    if (this.route !== null) this.route.stats.aborted++;
    else if (this.recorded) this.host.stats.abortedUnrouted++;
    this.status = 499;
    this.local?.abort();
    // The attempts end as cancelled before finish(), which closes the request's trace: their spans
    // belong in it. One still waiting for a connection keeps its node's counters until undici lets
    // go of it (Attempt.abandon).
    const reason = new Error('client disconnected');
    const a = this.first;
    const b = this.second;
    if (a !== null && !a.released) {
      a.abandon(reason);
      this.releaseAttempt(a);
    }
    if (b !== null && !b.released) {
      b.abandon(reason);
      this.releaseAttempt(b);
    }
    // Finish first: the aborts re-enter attemptError, which must see a finished session and
    // neither count a node failure nor replace the 499.
    this.finish();
    a?.cancel(reason);
    a?.abort(reason);
    b?.cancel(reason);
    b?.abort(reason);
  }

  /** The route's total timeout fired. */
  onDeadline(): void {
    this.onTotalTimeout();
  }

  onTotalTimeout(): void {
    if (this.finished) return;
    const err = new SluiceError(
      Errors.totalTimeout,
      `upstream did not finish within ${this.route!.timeouts.totalMs} ms`,
    );
    this.failWith(err);
  }

  /** Ends a response whose winner was chosen: aborts the node's answer and tells the client. */
  private abortStream(err: SluiceError): void {
    const w = this.winner;
    if (w !== null && !w.released) {
      w.cancelled = true;
      this.releaseAttempt(w);
    }
    if (this.downstream.started) this.endAfterHead(err);
    else this.fail(err.kind, err.message);
    w?.abort(err);
  }

  /**
   * The server's drain deadline passed with this request unfinished: it ends now, with a 503
   * `server_shutting_down` before its head, or an SSE error event (a cut body) after it. False when
   * it had finished already.
   */
  cutAtShutdown(): boolean {
    if (this.finished) return false;
    // A local endpoint's work (a batch's items) stops too: its next items must not start now.
    this.local?.abort();
    this.failWith(
      new SluiceError(Errors.draining, 'Sluice is shutting down and the request did not finish in time'),
    );
    return true;
  }

  /**
   * Ends the request with `err` wherever it stands (a timeout, a failed plugin hook): an error reply
   * before the head, an SSE error event or a cut body after it; attempts in flight are aborted.
   */
  failWith(err: SluiceError): void {
    if (this.finished) return;
    if (this.winner !== null) {
      this.abortStream(err);
      return;
    }
    this.fail(err.kind, err.message);
    this.first?.cancel(err);
    this.second?.cancel(err);
  }

  /** Gives back an attempt that was never dispatched (a plugin answered, failed, or the client left). */
  dropAttempt(att: Attempt): void {
    this.releaseAttempt(att);
  }

  /** Replaces the request body (a plugin's onRequest); the parsed JSON and cost are recomputed. */
  replaceBody(body: Buffer | null): void {
    this.body = body;
    this.parsed = UNPARSED;
    this.costTokens = 0;
    this.blocks = null;
  }

  /**
   * Ends a response after a failure once the node's head was taken. While the head is still held
   * back, the client gets a clean error reply instead. After it went out the status is fixed: an SSE
   * client gets an error event before the close; any other body is cut so the client sees a
   * truncated response rather than a short success.
   */
  private endAfterHead(e: SluiceError): void {
    if (this.streamAnswered()) {
      // The stream's last event was `[DONE]`: the node kept the body open (or broke it) after a
      // complete answer, which ends as one rather than with an error event after `[DONE]`.
      if (this.plug !== null) {
        this.plug.responseBody(null, null);
        return;
      }
      this.downstream.end();
      this.finish();
      return;
    }
    if (this.plug !== null) this.plug.errorCode = e.kind.code;
    this.rec.errorCode = e.kind.code;
    if (!this.downstream.started || this.downstream.abandonHead()) {
      // No byte reached the client (a plugin still holds the head, or it waits for the first body
      // bytes): it gets a clean error reply, and as no node answered, the tenant is charged nothing.
      this.winner = null;
      this.fail(e.kind, e.message, e.headers);
      return;
    }
    if (this.sse) {
      // The blank lines end a partly forwarded line or event first, so the error is an event of
      // its own rather than the tail of a cut line (that a client would drop as an unknown field).
      const event = Buffer.from(`\n\n${errorEvent(e.kind, e.message)}`);
      this.rec.bytes += event.length;
      this.downstream.write(event);
      this.downstream.end();
    } else {
      this.downstream.destroy();
    }
    this.finish();
  }

  /**
   * Sends a complete response Sluice produced itself (a local endpoint's answer) and finishes.
   * `headers` is flat `[name, value, ...]`; `x-request-id` is added.
   */
  respond(status: number, headers: readonly string[], body: string | Uint8Array): void {
    if (this.finished) return;
    this.status = status;
    // A success counts as a request served (finish); a plugin's refusal does not.
    if (status < 400) this.pluginAnswered = true;
    this.rec.bytes += typeof body === 'string' ? Buffer.byteLength(body) : body.length;
    const out = [...headers];
    // The plugin's own request id, when it gives one, replaces Sluice's (one header, not two).
    if (getFlat(out, 'x-request-id') === undefined) out.push('x-request-id', this.id);
    // An answer after the tenant's limit check carries its rate-limit headers, like any other.
    if (this.limit !== null && getFlat(out, 'x-ratelimit-limit-requests') === undefined)
      rateLimitHeaders(this.limit, out);
    this.downstream.reply(status, out, body, this.host.draining);
    this.finish();
  }

  /**
   * Sends a local error reply (before any response byte went out) and finishes. `status` replaces
   * the kind's own (a node's status passed on with Sluice's body).
   */
  fail(kind: ErrorKind, message: string, extraHeaders: readonly string[] = [], status = kind.status): void {
    if (this.finished) return;
    this.status = status;
    if (this.plug !== null) this.plug.errorCode = kind.code;
    this.rec.errorCode = kind.code;
    const headers = ['content-type', 'application/json', 'x-request-id', this.id, ...extraHeaders];
    if (this.limit !== null) rateLimitHeaders(this.limit, headers);
    const body = errorBody(kind, message);
    this.rec.bytes += Buffer.byteLength(body);
    this.downstream.reply(status, headers, body, kind.closeConnection || this.host.draining);
    this.finish();
  }

  /** Ends the request's bookkeeping, exactly once, whatever ended it. */
  finish(): void {
    // HOT
    if (this.finished) return;
    this.finished = true;
    this.dlList?.remove(this);
    if (this.retryTimer !== null) clearTimeout(this.retryTimer);
    if (this.hedgeTimer !== null) clearTimeout(this.hedgeTimer);
    // A retry granted and never dispatched (no node took it, the request ended during its backoff)
    // spent nothing: its token goes back.
    if (this.retryPool !== null) this.retryPool.state.retryBudget.refund();
    const now = nowMs();
    const gate = this.gate;
    gate?.close(now);
    // The request's share of the budgets lapses with it.
    this.retryFund?.release();
    this.hedgeFund?.release();
    const answered = this.winner !== null || this.batchAnswered;
    const used = !answered
      ? -1
      : this.earlier !== null
        ? this.earlier.tokens(this.newest)
        : parseUsageTokens(null, null, this.newest);
    this.newest = null;
    this.earlier = null;
    const d = this.limit;
    if (d !== null) {
      const limiter = this.plan.tenants.limiter!;
      // Never dispatched (admission turned it away, the client left first): charge nothing. Sent
      // to a node that never answered (a timeout, a reset): the request counts, its tokens do not;
      // a failing fleet must not lift requests_per_minute.
      if (!answered) {
        // A plugin's own answer after the limit check (a response-cache hit) is a request served:
        // it counts against requests_per_minute; it generated no tokens.
        if (this.pluginAnswered) {
          limiter.reconcile(d, 0);
          limiter.release(d);
        } else if (!this.dispatched) limiter.refund(d);
        else {
          limiter.reconcile(d, 0);
          limiter.release(d);
        }
      } else {
        // The node's usage, else nothing for an error answer (a 4xx or 5xx generated nothing to
        // charge for); a success without usage keeps its estimate.
        if (used >= 0) limiter.reconcile(d, used);
        else if (this.answerStatus >= 400) limiter.reconcile(d, 0);
        limiter.release(d);
      }
    }
    const route = this.route;
    if (route !== null) {
      route.stats.count(this.status);
      route.stats.duration.recordMs(now - this.startMs);
    }
    if (this.recorded) this.rec.onDone(this, now, gate, used);
    // An onDone hook still pending keeps the plan (its plugin instances close with it) until it settles.
    if (this.plug === null || !this.plug.done()) this.plan.release();
    this.host.sessionDone(this);
  }
}

function onRetryTimer(s: Session): void {
  s.onRetryTimer();
}

function onHedgeTimer(s: Session): void {
  s.onHedgeTimer();
}
