/**
 * The hook runner of one request: runs a phase's hooks in chain order, synchronously until one
 * returns a thenable (then the rest of the phase continues when it settles), bounds async hooks by
 * the instance's `timeout_ms`, turns a throw, rejection or timeout into the request's 500 (or skips
 * the hook with `fail_open`), and hands control back to the Session at each phase's end. It is also
 * the `PluginRequest` the hooks see (one object per request, created only on routes and listeners
 * that have plugins). It never touches uWS or undici objects: it goes through the Session.
 */
import {
  MANAGED_HEADERS,
  SERVER_RESPONSE_HEADERS,
  type PhaseName,
  type PluginRequest,
  type Usage,
} from '../../plugins/api.js';
import type { Attempt } from '../lifecycle/attempt.js';
import { nowMs } from '../lifecycle/clock.js';
import { Errors, SluiceError } from '../lifecycle/errors.js';
import { getFlat, hasNonAscii, isEventStream } from '../lifecycle/headers.js';
import type { Session } from '../lifecycle/session.js';
import { BodyTail } from '../lifecycle/usage-tail.js';
import type { Pool } from '../pool/pool.js';
import { PHASE_NAMES, Phase, type PhaseHooks, type PluginChain, type PreRouteHooks } from './plugin-chain.js';
import { usageReport } from './usage-report.js';

const NO_TAGS: Readonly<Record<string, string>> = Object.freeze({});

/** A local answer a hook asked for; sent once the hook has returned. */
interface Reply {
  status: number;
  headers: string[];
  body: string | Uint8Array;
  /** Error code for onDone and the rejection counter, or null for a plain answer. */
  code: string | null;
}

function setFlat(list: string[], name: string, value: string): void {
  removeFlat(list, name);
  list.push(name, value);
}

function removeFlat(list: string[], name: string): void {
  for (let i = list.length - 2; i >= 0; i -= 2) if (list[i] === name) list.splice(i, 2);
}

function checkHeader(name: string, value?: string): void {
  // Plugins may be plain JavaScript: a value of another type would reach the server's writer, which
  // throws outside the plugin's hook (a number passes the checks below as its digits).
  if (typeof name !== 'string') throw new TypeError(`a header name must be a string, not ${typeof name}`);
  if (value !== undefined && typeof value !== 'string')
    throw new TypeError(`header ${name}: the value must be a string, not ${typeof value}`);
  if (name !== name.toLowerCase() || !/^[a-z0-9!#$%&'*+.^_`|~-]+$/.test(name))
    throw new TypeError(`header name ${JSON.stringify(name)} must be a lower-case HTTP token`);
  if (MANAGED_HEADERS.has(name)) throw new TypeError(`header ${name} is managed by Sluice`);
  if (value !== undefined && /[\r\n\0]/.test(value))
    throw new TypeError(`header ${name}: the value must not contain CR, LF or NUL`);
  // Header values are byte strings, one character per byte (as in Node's http): U+0080 to U+00FF
  // go out as that byte; a wider character has no byte to be (encode it first, e.g. RFC 8187).
  if (value !== undefined && /[^\x00-\xff]/.test(value))
    throw new TypeError(
      `header ${name}: the value must be a byte string (characters up to U+00FF); encode other text first, e.g. as RFC 8187 percent-encoding`,
    );
}

function toBuffer(body: string | Uint8Array | object): Buffer {
  if (typeof body === 'string') return Buffer.from(body);
  if (body instanceof Uint8Array) return Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  return Buffer.from(JSON.stringify(body));
}

function reason(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

function onWaitTimeout(run: PluginRun, seq: number): void {
  run.waitTimedOut(seq);
}

export class PluginRun implements PluginRequest {
  readonly s: Session;
  /** The route's chain; null while only the listener's pre-route hooks apply. */
  chain: PluginChain | null = null;
  /** The listener's pre-route hooks (their onDone runs when no chain took over), or null. */
  private pre: PreRouteHooks | null = null;
  listener: string;
  /** Per-request state, by instance slot. */
  private slots: unknown[];
  /** Slot of the hook running now. */
  private slot = 0;
  private phaseNo: Phase = Phase.request;
  private tagMap: Record<string, string> | null = null;
  /** onRoute's choice of pool, or null. */
  pool_: Pool | null = null;
  /** True once the onRoute hooks ran (the session re-enters admit() after them). */
  routeDone = false;
  private reply: Reply | null = null;
  /** The attempt whose onUpstreamRequest hooks run. */
  private att: Attempt | null = null;
  /** This attempt's headers once a hook changed them (a copy), else null. */
  private upHeaders: string[] | null = null;
  /** This attempt's body once a hook changed it, else undefined. */
  private upBody: Buffer | null | undefined = undefined;
  private respStatus = 0;
  private respHeaders: string[] = [];
  private respLength = -1;
  private respNoBody = false;
  /** Some response header value holds a character from U+0080 to U+00FF (see `Downstream.start`). */
  private respBinary = false;
  private sse = false;
  /** The winning attempt: its body is paused and resumed through it. */
  private controller: Attempt | null = null;
  /**
   * A write to the client returned false and the node's body was paused for it. While it is set,
   * only the client's drain resumes the node (`Session.onDownstreamDrain`), never a settled hook;
   * the node's next chunk shows that the drain came, and clears it.
   */
  private downstreamFull = false;
  /** An onDone hook was pending when the request finished: the plan is released when it settles. */
  private holdsPlan = false;
  /** While a head or chunk hook is pending: chunks (null = the end) that arrived meanwhile. */
  private holding = false;
  private held: (Buffer | null)[] | null = null;
  /** The chunk the chunk hooks are transforming (null: the end). */
  private chunk: Buffer | null = null;
  /**
   * What goes out for it. At the end: the bytes hooks released there (what they held back), which
   * each later hook gets as a chunk before it gets the end.
   */
  private out: Buffer | null = null;
  /** At the end, which call of the current hook runs: 0 the released bytes, 1 the end itself. */
  private endStep = 0;
  /** The newest chunk and the bytes before it, for the onDone phase's usage (usage-tail.ts). */
  private newest: Buffer | null = null;
  private earlier: BodyTail | null = null;
  /** Response body bytes sent: the request's record counts them, whoever wrote them. */
  get bytesOut(): number {
    return this.s.rec.bytes;
  }
  ttfbMs = -1;
  errorCode: string | null = null;
  private doneMs = -1;
  private waitHooks: PhaseHooks | null = null;
  private waitIndex = 0;
  private waitSeq = 0;
  private timer: NodeJS.Timeout | null = null;

  constructor(s: Session, listener: string, slots: number) {
    this.s = s;
    this.listener = listener;
    this.slots = new Array<unknown>(slots);
  }

  // ---- driving the phases (called by the Session) ----

  /**
   * Runs a listener's onRequest hooks before routing. Returns true when the session may route now;
   * false when the request was answered or a hook went async (the session is resumed later).
   */
  static preRoute(s: Session, pre: PreRouteHooks): boolean {
    const run = new PluginRun(s, pre.listener, pre.slots);
    s.plug = run;
    run.pre = pre;
    run.phaseNo = Phase.request;
    return run.runPhase(pre.hooks, 0);
  }

  /**
   * Attaches the route's chain and runs the route plugins' onRequest hooks. Returns true when the
   * session may go on to authenticate the tenant.
   */
  static enterRoute(s: Session, chain: PluginChain): boolean {
    let run = s.plug;
    if (run === null) {
      run = new PluginRun(s, chain.listener, chain.instances.length);
      s.plug = run;
    } else if (run.slots.length < chain.instances.length) {
      run.slots.length = chain.instances.length;
    }
    run.chain = chain;
    if (chain.onRequest.length === 0) return true;
    run.phaseNo = Phase.request;
    return run.runPhase(chain.onRequest, 0);
  }

  /** Runs onRoute; true when the session may admit now. */
  routeHooks(): boolean {
    this.routeDone = true;
    const hooks = this.chain!.onRoute;
    if (hooks.length === 0) return true;
    this.phaseNo = Phase.route;
    return this.runPhase(hooks, 0);
  }

  /** Runs onUpstreamRequest for `att`; true when the session may dispatch it now. */
  upstreamHooks(att: Attempt): boolean {
    this.att = att;
    this.upHeaders = null;
    this.upBody = undefined;
    const hooks = this.chain!.onUpstreamRequest;
    if (hooks.length === 0) return true;
    this.phaseNo = Phase.upstreamRequest;
    return this.runPhase(hooks, 0);
  }

  /**
   * The headers to send with the current attempt. On a route whose plugins read or rewrite the
   * answer's bytes (onResponseChunk) the client's Accept-Encoding is left out: the node answers
   * uncompressed, since a hook handed gzip bytes as text would corrupt them (and a cache would
   * serve them to clients that never asked for gzip).
   */
  upstreamHeaders(): string[] {
    const h = this.upHeaders ?? this.s.headers;
    const chain = this.chain;
    return chain !== null && chain.onResponseChunk.length > 0 ? withoutAcceptEncoding(h) : h;
  }

  /** The body to send with the current attempt. */
  upstreamBody(): Buffer | null {
    return this.upBody === undefined ? this.s.body : this.upBody;
  }

  /**
   * The winner's head: runs onResponseHead, then writes the head (chunked when chunk hooks may
   * change the body). A pending head hook pauses the node's body; its chunks wait here.
   */
  responseHead(
    att: Attempt,
    status: number,
    headers: string[],
    length: number,
    noBody: boolean,
    binary: boolean,
  ): void {
    this.dropPendingHedge(att);
    this.att = att;
    this.controller = att;
    this.respStatus = status;
    this.respHeaders = headers;
    this.respNoBody = noBody;
    this.respBinary = binary;
    this.respLength = this.chain!.onResponseChunk.length > 0 ? -1 : length;
    this.sse = isEventStream(getFlat(headers, 'content-type') ?? '');
    this.ttfbMs = nowMs() - this.s.startMs;
    const hooks = this.chain!.onResponseHead;
    if (hooks.length === 0) {
      this.sendHead();
      return;
    }
    this.phaseNo = Phase.responseHead;
    if (this.runPhase(hooks, 0)) this.sendHead();
    else if (this.waitHooks !== null) this.hold();
  }

  /**
   * `winner` answered while the other attempt (a hedge) waits for an onUpstreamRequest hook: that
   * attempt will never go out. It is given back now, and the hook's result is ignored when it comes
   * (the response phases run from here; the hook must not re-enter them).
   */
  private dropPendingHedge(winner: Attempt): void {
    if (this.waitHooks === null || this.phaseNo !== Phase.upstreamRequest) return;
    const att = this.att;
    this.waitSeq++;
    this.waitHooks = null;
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    if (att !== null && att !== winner) this.s.dropAttempt(att);
  }

  /** A body chunk of the winner (null: the body ended). */
  responseBody(att: Attempt | null, chunk: Buffer | null): void {
    // HOT
    if (att !== null) this.controller = att;
    // A paused node sends nothing more (Attempt.onData): this chunk came after a resume, which
    // while the client was full only its drain makes.
    this.downstreamFull = false;
    // undici hands over an empty chunk when it resumes a paused body with nothing read yet: an
    // async hook run on it would pause and resume the body again, and again, without end.
    if (chunk !== null && chunk.length === 0) return;
    if (this.holding) {
      (this.held ??= []).push(chunk);
      this.controller?.pause();
      return;
    }
    this.process(chunk);
  }

  /** Runs the chunk hooks on one chunk and forwards the result; false when a hook went async. */
  private process(chunk: Buffer | null): boolean {
    // HOT
    if (chunk !== null && this.chain!.onDone.length > 0) {
      const prev = this.newest;
      if (prev !== null) (this.earlier ??= new BodyTail()).keep(prev);
      this.newest = chunk;
    }
    const hooks = this.chain!.onResponseChunk;
    if (hooks.length === 0) {
      this.emit(chunk, chunk);
      return true;
    }
    this.phaseNo = Phase.responseChunk;
    this.chunk = chunk;
    this.out = chunk;
    if (this.runPhase(hooks, 0)) {
      this.emit(this.out, chunk);
      return true;
    }
    if (this.waitHooks !== null) this.hold();
    return false;
  }

  /** Writes `out` (the transformed chunk) and ends the response when `input` was the end. */
  private emit(out: Buffer | null, input: Buffer | null): void {
    // HOT
    const s = this.s;
    if (s.finished) return;
    if (out !== null && out.length > 0 && !this.respNoBody) {
      s.rec.bytes += out.length;
      if (!s.downstream.write(out)) {
        this.downstreamFull = true;
        this.controller?.pause();
      }
    }
    if (input === null) {
      s.downstream.end();
      s.finish();
    }
  }

  private hold(): void {
    this.holding = true;
    this.controller?.pause();
  }

  private sendHead(): void {
    const s = this.s;
    if (s.finished) return;
    const status = this.respStatus;
    s.status = status;
    // A status a hook set that has no content (204, 304) sends none: the node's body is dropped, as
    // a client would read it as the start of the next response.
    if (status === 204 || status === 304) this.respNoBody = true;
    s.downstream.start(status, this.respHeaders, this.respLength, this.respNoBody, this.respBinary);
  }

  /** Processes what arrived while a hook was pending, then lets the node's body flow again. */
  private release(): void {
    this.holding = false;
    const held = this.held;
    while (held !== null && held.length > 0) {
      if (this.s.finished) return;
      const c = held.shift()!;
      if (!this.process(c)) return;
    }
    // A write above (or before the hook) found the client full: its drain resumes the node.
    if (!this.s.finished && !this.downstreamFull) this.controller?.resume();
  }

  /**
   * A micro-batch answered the request with `body` (the response phases do not run for it): onDone
   * sees its usage and its time to first byte, as for an answer from a node.
   */
  batchAnswered(body: Buffer): void {
    this.newest = body;
    this.earlier = null;
    this.ttfbMs = nowMs() - this.s.startMs;
  }

  /** Runs the onDone hooks (from Session.finish, exactly once) and drops anything pending. */
  done(): boolean {
    if (this.waitHooks !== null) this.abandon();
    this.waitSeq++;
    this.waitHooks = null;
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    this.held = null;
    this.doneMs = nowMs();
    const chain = this.chain;
    const hooks = chain !== null ? chain.onDone : (this.pre?.done ?? null);
    if (hooks === null || hooks.length === 0) return false;
    this.phaseNo = Phase.done;
    // An answer a hook made before the request finished (an async hook that answered, then was
    // abandoned) is not the done phase's: left set, it would end the phase at its first hook.
    this.reply = null;
    // A pending onDone hook keeps the request's plan (and so its plugin instances, which close
    // with the plan) until the phase completes: the session leaves the release to phaseComplete.
    this.runPhase(hooks, 0);
    this.holdsPlan = this.waitHooks !== null;
    return this.holdsPlan;
  }

  // ---- the hook loop ----

  /**
   * Runs `hooks` from index `from` in the current phase. True when every hook ran synchronously
   * and the request goes on; false when it was answered, failed, or a hook is pending.
   */
  private runPhase(hooks: PhaseHooks, from: number): boolean {
    // HOT
    if (this.phaseNo === Phase.responseChunk && this.chunk === null) return this.runEnd(hooks, from, 0);
    for (let i = from; i < hooks.length; i++) {
      const h = hooks[i]!;
      this.slot = h.slot;
      let r: unknown;
      try {
        r =
          this.phaseNo === Phase.responseChunk
            ? (h.fn as (this: unknown, req: PluginRequest, c: Buffer | null) => unknown).call(
                h.inst.hooks,
                this,
                this.chunk,
              )
            : (h.fn as (this: unknown, req: PluginRequest) => unknown).call(h.inst.hooks, this);
      } catch (e) {
        if (!this.hookFailed(i, hooks, reason(e))) return false;
        continue;
      }
      if (typeof r === 'object' && r !== null && typeof (r as PromiseLike<unknown>).then === 'function') {
        this.wait(hooks, i, r as PromiseLike<unknown>);
        return false;
      }
      if (this.phaseNo === Phase.responseChunk && !this.useChunk(r, i, hooks)) return false;
      if (this.reply !== null) {
        this.sendReply();
        return false;
      }
    }
    return true;
  }

  /**
   * The end of the body, from hook `from` (its call `step`): each hook first gets, as a chunk, the
   * bytes the hooks before it released at the end (what they held back, e.g. model-alias's
   * rewritten answer), then the end; what it returns for the first replaces them, what it releases
   * at the end is added. So a later hook sees every byte that goes out, as it would mid-body.
   */
  private runEnd(hooks: PhaseHooks, from: number, step: number): boolean {
    for (let i = from; i < hooks.length; i++, step = 0) {
      const h = hooks[i]!;
      this.slot = h.slot;
      for (; step < 2; step++) {
        const input = step === 0 ? this.out : null;
        if (step === 0 && (input === null || input.length === 0)) continue;
        this.endStep = step;
        let r: unknown;
        try {
          r = (h.fn as (this: unknown, req: PluginRequest, c: Buffer | null) => unknown).call(
            h.inst.hooks,
            this,
            input,
          );
        } catch (e) {
          if (!this.hookFailed(i, hooks, reason(e))) return false;
          break; // fail_open: the hook is skipped
        }
        if (typeof r === 'object' && r !== null && typeof (r as PromiseLike<unknown>).then === 'function') {
          this.wait(hooks, i, r as PromiseLike<unknown>);
          return false;
        }
        if (!this.useChunk(r, i, hooks)) return false;
        if (this.reply !== null) {
          this.sendReply();
          return false;
        }
      }
    }
    return true;
  }

  /** Applies a chunk hook's result; false when the value was invalid and the request failed. */
  private useChunk(r: unknown, i: number, hooks: PhaseHooks): boolean {
    if (r === undefined || r === null) return true;
    let b: Buffer;
    if (typeof r === 'string') b = Buffer.from(r);
    else if (r instanceof Uint8Array) b = Buffer.from(r.buffer, r.byteOffset, r.byteLength);
    else return this.hookFailed(i, hooks, 'onResponseChunk must return nothing, a string or bytes');
    if (this.chunk !== null) {
      // The next hook transforms what this one produced.
      this.chunk = b;
      this.out = b;
    } else if (this.endStep === 0) {
      // At the end, what the hook made of the bytes released before it.
      this.out = b;
    } else if (b.length > 0) {
      // At the end, bytes a hook releases (e.g. what it held back) go out before the end.
      this.out = this.out === null ? b : Buffer.concat([this.out, b]);
    }
    return true;
  }

  private wait(hooks: PhaseHooks, i: number, p: PromiseLike<unknown>): void {
    const seq = ++this.waitSeq;
    this.waitHooks = hooks;
    this.waitIndex = i;
    this.timer = setTimeout(onWaitTimeout, hooks[i]!.inst.timeoutMs, this, seq);
    Promise.resolve(p).then(
      (v) => this.settled(seq, v, null),
      (e: unknown) => this.settled(seq, undefined, reason(e)),
    );
  }

  /** The pending hook timed out. */
  waitTimedOut(seq: number): void {
    if (seq !== this.waitSeq || this.waitHooks === null) return;
    const hooks = this.waitHooks;
    this.timer = null;
    this.settled(seq, undefined, `timed out after ${hooks[this.waitIndex]!.inst.timeoutMs} ms`);
  }

  private settled(seq: number, value: unknown, error: string | null): void {
    const hooks = this.waitHooks;
    if (seq !== this.waitSeq || hooks === null) return;
    const i = this.waitIndex;
    this.waitHooks = null;
    this.waitSeq++;
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    const done = this.phaseNo === Phase.done;
    if (this.s.finished && !done) {
      this.abandon();
      return;
    }
    this.slot = hooks[i]!.slot;
    if (error !== null) {
      if (!this.hookFailed(i, hooks, error)) return;
    } else {
      if (this.phaseNo === Phase.responseChunk && !this.useChunk(value, i, hooks)) return;
      if (this.reply !== null) {
        this.sendReply();
        return;
      }
      if (this.phaseNo === Phase.responseChunk && this.chunk === null && this.endStep === 0) {
        // The hook transformed the released bytes; it gets the end next.
        if (this.runEnd(hooks, i, 1)) this.phaseComplete();
        return;
      }
    }
    if (this.runPhase(hooks, i + 1)) this.phaseComplete();
  }

  /** The request finished while a hook was pending: give back an attempt that never went out. */
  private abandon(): void {
    const att = this.att;
    if (this.phaseNo === Phase.upstreamRequest && att !== null) this.s.dropAttempt(att);
  }

  /** Every hook of the current phase ran (after an async one): hand control back. */
  private phaseComplete(): void {
    const s = this.s;
    switch (this.phaseNo) {
      case Phase.request:
        if (this.chain === null) s.routeRequest();
        else s.authenticate();
        return;
      case Phase.route:
        s.admit();
        return;
      case Phase.upstreamRequest:
        s.dispatchAttempt(this.att!);
        return;
      case Phase.responseHead:
        this.sendHead();
        this.release();
        return;
      case Phase.responseChunk:
        this.emit(this.out, this.chunk);
        this.release();
        return;
      case Phase.done:
        if (this.holdsPlan) {
          this.holdsPlan = false;
          s.plan.release();
        }
        return;
      default:
        return;
    }
  }

  /**
   * Hook `i` failed. With `fail_open` (and always in onDone) the hook is skipped and the phase goes
   * on: returns true. Otherwise the request ends with a 500 naming the plugin: returns false.
   */
  private hookFailed(i: number, hooks: PhaseHooks, why: string): boolean {
    const inst = hooks[i]!.inst;
    const phase = this.phaseNo;
    const message = `plugin ${inst.name} failed in ${PHASE_NAMES[phase]!}: ${why}`;
    inst.failed(phase, message, nowMs());
    this.reply = null;
    if (inst.failOpen || phase === Phase.done) return true;
    const s = this.s;
    this.errorCode = Errors.pluginFailed.code;
    if (phase === Phase.upstreamRequest && this.att !== null) s.dropAttempt(this.att);
    s.failWith(new SluiceError(Errors.pluginFailed, message));
    return false;
  }

  private sendReply(): void {
    const r = this.reply!;
    this.reply = null;
    const s = this.s;
    if (r.code !== null) {
      this.errorCode = r.code;
      s.host.stats.countRejected(Errors.pluginRejected.id);
    }
    if (this.phaseNo === Phase.upstreamRequest && this.att !== null) s.dropAttempt(this.att);
    s.respond(r.status, r.headers, r.body);
  }

  // ---- PluginRequest ----

  private allow(phaseMask: number, what: string): void {
    if (((1 << this.phaseNo) & phaseMask) === 0)
      throw new TypeError(`${what} is not allowed in ${PHASE_NAMES[this.phaseNo]!}`);
  }

  get phase(): PhaseName {
    return PHASE_NAMES[this.phaseNo]!;
  }
  get id(): string {
    return this.s.id;
  }
  get method(): string {
    return this.s.method;
  }
  get path(): string {
    return this.s.path;
  }
  get url(): string {
    return this.s.url;
  }
  get route(): string | null {
    return this.s.route?.name ?? null;
  }
  get pool(): string | null {
    return this.s.pool?.name ?? this.pool_?.name ?? null;
  }
  get node(): string | null {
    return this.att?.node.id ?? null;
  }
  get attempt(): number {
    return this.s.attempts;
  }
  get tenant(): string {
    return this.s.tenant;
  }
  get internal(): boolean {
    return this.s.internal;
  }
  get status(): number {
    return this.phaseNo === Phase.done ? this.s.status : this.respStatus;
  }
  get tags(): Readonly<Record<string, string>> {
    return this.tagMap ?? NO_TAGS;
  }
  get state(): unknown {
    return this.slots[this.slot];
  }
  set state(v: unknown) {
    this.slots[this.slot] = v;
  }
  get body(): Buffer | null {
    return this.phaseNo === Phase.upstreamRequest ? this.upstreamBody() : this.s.body;
  }
  get streaming(): boolean {
    return this.sse;
  }
  get durationMs(): number {
    return (this.doneMs < 0 ? nowMs() : this.doneMs) - this.s.startMs;
  }
  get usage(): Usage | null {
    if (this.earlier === null) return usageReport(null, null, this.newest);
    const [older, old] = this.earlier.parts();
    return usageReport(older, old, this.newest);
  }

  header(name: string): string | undefined {
    return getFlat(this.phaseNo === Phase.upstreamRequest ? this.upstreamHeaders() : this.s.headers, name);
  }

  json(): unknown {
    return this.s.json();
  }

  setMethod(method: string): void {
    this.allow(1 << Phase.request, 'setMethod');
    if (!/^[A-Z]+$/.test(method))
      throw new TypeError(`method ${JSON.stringify(method)} must be upper-case letters`);
    this.s.method = method;
  }

  setUrl(url: string): void {
    this.allow(1 << Phase.request, 'setUrl');
    if (!url.startsWith('/') || /[\s#]/.test(url))
      throw new TypeError(`url ${JSON.stringify(url)} must be a path`);
    const q = url.indexOf('?');
    this.s.url = url;
    this.s.path = q < 0 ? url : url.slice(0, q);
  }

  setHeader(name: string, value: string): void {
    this.allow((1 << Phase.request) | (1 << Phase.upstreamRequest), 'setHeader');
    checkHeader(name, value);
    setFlat(this.headerList(), name, value);
  }

  removeHeader(name: string): void {
    this.allow((1 << Phase.request) | (1 << Phase.upstreamRequest), 'removeHeader');
    checkHeader(name);
    removeFlat(this.headerList(), name);
  }

  private headerList(): string[] {
    if (this.phaseNo !== Phase.upstreamRequest) return this.s.headers;
    return (this.upHeaders ??= this.s.headers.slice());
  }

  setBody(body: string | Uint8Array | object): void {
    this.allow((1 << Phase.request) | (1 << Phase.upstreamRequest), 'setBody');
    const b = toBuffer(body);
    if (this.phaseNo === Phase.upstreamRequest) this.upBody = b;
    else this.s.replaceBody(b);
  }

  setTenant(name: string): void {
    this.allow(1 << Phase.request, 'setTenant');
    const table = this.s.plan.tenants.table;
    if (table === null) {
      this.s.tenant = name;
      return;
    }
    const t = table.get(name);
    if (t === null) throw new TypeError(`unknown tenant ${JSON.stringify(name)}`);
    this.s.tenantInfo = t;
    this.s.tenant = t.name;
  }

  respond(status: number, body: string | Uint8Array, headers: Readonly<Record<string, string>> = {}): void {
    this.allow((1 << Phase.request) | (1 << Phase.route), 'respond');
    const flat: string[] = [];
    for (const [k, v] of Object.entries(headers)) {
      checkHeader(k, v);
      checkResponseHeader(k);
      flat.push(k, v);
    }
    if (typeof body !== 'string' && !(body instanceof Uint8Array))
      throw new TypeError(
        `respond: the body must be a string or a Uint8Array, not ${body === null ? 'null' : typeof body} (JSON.stringify an object first)`,
      );
    const s = checkStatus(status);
    // A 204 or 304 has no content (RFC 9110 §15.3.5, §15.4.5): a client would read a body as the
    // start of the next response on the connection.
    if ((s === 204 || s === 205 || s === 304) && body.length > 0)
      throw new TypeError(`respond: a ${s} answer has no body; pass ''`);
    // An empty answer has no type to announce.
    if (getFlat(flat, 'content-type') === undefined && body.length > 0)
      flat.push('content-type', 'application/json');
    this.reply = { status: s, headers: flat, body, code: null };
  }

  reject(
    status: number,
    message: string,
    code: string | null = 'rejected_by_plugin',
    param: string | null = null,
  ): void {
    this.allow((1 << Phase.request) | (1 << Phase.route), 'reject');
    if (typeof message !== 'string')
      throw new TypeError(
        `reject: the message must be a string, not ${message === null ? 'null' : typeof message}`,
      );
    if (typeof code !== 'string' && code !== null)
      throw new TypeError(`reject: the code must be a string or null, not ${typeof code}`);
    if (param !== null && typeof param !== 'string')
      throw new TypeError(`reject: param must be a string or null, not ${typeof param}`);
    const type = status >= 500 ? 'server_error' : 'invalid_request_error';
    this.reply = {
      status: checkStatus(status, 400),
      headers: ['content-type', 'application/json'],
      body: JSON.stringify({ error: { message, type, param, code } }),
      // Counted as a plugin's rejection whatever code the body carries (null included).
      code: code ?? 'rejected_by_plugin',
    };
  }

  usePool(name: string): void {
    this.allow(1 << Phase.route, 'usePool');
    const p = this.s.plan.pools.get(name);
    if (p === undefined) throw new TypeError(`unknown pool ${JSON.stringify(name)}`);
    this.pool_ = p;
  }

  tag(name: string, value: string): void {
    if (this.phaseNo === Phase.done) throw new TypeError('tag is not allowed in onDone');
    (this.tagMap ??= {})[name] = value;
  }

  responseHeader(name: string): string | undefined {
    return getFlat(this.respHeaders, name);
  }

  setResponseHeader(name: string, value: string): void {
    this.allow(1 << Phase.responseHead, 'setResponseHeader');
    checkHeader(name, value);
    checkResponseHeader(name);
    if (hasNonAscii(value)) this.respBinary = true;
    setFlat(this.respHeaders, name, value);
  }

  removeResponseHeader(name: string): void {
    this.allow(1 << Phase.responseHead, 'removeResponseHeader');
    checkHeader(name);
    removeFlat(this.respHeaders, name);
  }

  setStatus(status: number): void {
    this.allow(1 << Phase.responseHead, 'setStatus');
    this.respStatus = checkStatus(status);
  }
}

/** The server writes its own `Date` on every answer: a plugin's would make two. */
function checkResponseHeader(name: string): void {
  if (SERVER_RESPONSE_HEADERS.has(name))
    throw new TypeError(`header ${name} is written by the server: a second one would be sent`);
}

/** `status` when it is an integer from `min` to 599 (an error status for `reject`: 400). */
function checkStatus(status: number, min = 200): number {
  if (!Number.isInteger(status) || status < min || status > 599)
    throw new TypeError(`status ${status} must be an integer from ${min} to 599`);
  return status;
}

/** `headers` without `accept-encoding` (the same array when it has none). */
function withoutAcceptEncoding(headers: string[]): string[] {
  for (let i = 0; i < headers.length; i += 2) {
    if (headers[i] === 'accept-encoding') {
      const out: string[] = [];
      for (let j = 0; j < headers.length; j += 2) {
        if (headers[j] !== 'accept-encoding') out.push(headers[j]!, headers[j + 1]!);
      }
      return out;
    }
  }
  return headers;
}
