/**
 * The batch endpoints Sluice answers itself: `POST /v1/batch` (synchronous), the OpenAI-compatible
 * `/v1/files` and `/v1/batches` (durable jobs in a `JobBackend`), and `Idempotency-Key` on every
 * POST among them. It authenticates the caller like any route, maps each call to the store or to
 * a `SyncBatchRun`, and turns every failure into an OpenAI-shaped reply. It never forwards the
 * request itself and never executes job items (the job worker does).
 */
import type { BatchApiConfig } from '../../config/types.js';
import { Errors } from '../lifecycle/errors.js';
import type { LocalEndpoints } from '../lifecycle/local-endpoints.js';
import type { Session } from '../lifecycle/session.js';
import type { JobBackend, ListOptions } from '../jobs/job-backend.js';
import type { BatchOrigin, CreateFileParams } from '../jobs/job-store.js';
import { JobError, JobErrors, type JobErrorKind } from '../jobs/job-errors.js';
import {
  hashIdempotentRequest,
  idempotencyCredential,
  scopeIdempotencyKey,
  type IdempotencyStore,
  type StoredResponse,
} from '../jobs/idempotency-store.js';
import { extractApiKey } from '../tenant/api-key.js';
import type { Tenant } from '../tenant/tenant-table.js';
import { parseSyncBatch, SyncBatchInvalid, SyncBatchRun } from './sync-batch.js';
import { readUpload } from './upload.js';

/** A reply a handler produced; `headers` flat `[name, value, ...]`. */
export interface LocalReply {
  status: number;
  headers: string[];
  body: string;
}

/** What a handler gets besides the session. */
interface CallContext {
  s: Session;
  cfg: BatchApiConfig;
  owner: string;
  tenant: Tenant | null;
  /** The call's response will be stored for replay: work must go on if the client leaves. */
  keepRunning: boolean;
  /** Id segment of `/v1/files/{id}` or `/v1/batches/{id}`, '' when none. */
  id: string;
  /** The form of `POST /v1/files`, once read (the idempotency check reads it first). */
  upload: CreateFileParams | null;
}

/** Counters since start, by outcome. */
export interface BatchApiStats {
  requests: number;
  replayed: number;
  conflicts: number;
  storeErrors: number;
  syncItems: number;
}

const JSON_HEADERS = ['content-type', 'application/json'];
/** Longest accepted `Idempotency-Key`, characters. */
const MAX_KEY_LENGTH = 255;
/**
 * Request headers a durable batch never keeps for its items, even when a route matches on one: the
 * caller's credentials (items run as the batch's tenant) and cookies.
 */
const NEVER_KEPT = new Set(['authorization', 'x-api-key', 'cookie', 'proxy-authorization']);
/** Request headers not copied onto the items of a synchronous batch. */
const NOT_FOR_ITEMS = new Set([
  'content-length',
  'content-type',
  'x-request-id',
  'idempotency-key',
  // Results are parsed as JSON: the nodes must answer uncompressed.
  'accept-encoding',
]);

type Handler = (c: CallContext) => Promise<LocalReply>;

/** The handlers of one path, by method. */
type Methods = Readonly<Record<string, Handler>>;

function json(status: number, value: unknown): LocalReply {
  return { status, headers: [...JSON_HEADERS], body: JSON.stringify(value) };
}

/** An OpenAI error reply for a catalogue entry (`JobErrors`, or the data plane's `Errors`). */
function errorReply(
  kind: Pick<JobErrorKind, 'status' | 'type' | 'code'>,
  message: string,
  param: string | null = null,
  extra: string[] = [],
): LocalReply {
  return {
    status: kind.status,
    headers: [...JSON_HEADERS, ...extra],
    body: JSON.stringify({ error: { message, type: kind.type, param, code: kind.code } }),
  };
}

/** True when `path` is one of the batch API's (`/v1/batch`, `/v1/batches…`, `/v1/files…`). */
export function batchApiOwns(path: string): boolean {
  // HOT: every request passes here before routing.
  if (path.length < 9 || (path.charCodeAt(4) !== 98 /* b */ && path.charCodeAt(4) !== 102) /* f */)
    return false;
  return (
    path === '/v1/batch' ||
    path === '/v1/batches' ||
    path.startsWith('/v1/batches/') ||
    path === '/v1/files' ||
    path.startsWith('/v1/files/')
  );
}

/**
 * The local endpoints over one job backend and idempotency store. `config` returns the current
 * plan's `batch_api` section (endpoints, sync limits and anonymous access follow reloads).
 */
export class BatchApi implements LocalEndpoints {
  readonly stats: BatchApiStats = { requests: 0, replayed: 0, conflicts: 0, storeErrors: 0, syncItems: 0 };

  constructor(
    private readonly backend: JobBackend,
    private readonly idempotency: IdempotencyStore,
    private readonly onStoreError: (err: unknown) => void = () => {},
  ) {}

  owns(path: string): boolean {
    // HOT: every request passes here before routing.
    return batchApiOwns(path);
  }

  handle(s: Session): void {
    this.stats.requests++;
    const cfg = s.plan.config.batch_api!;
    const table = s.plan.tenants.table;
    let tenant: Tenant | null = null;
    if (table !== null) {
      tenant = table.authenticate(extractApiKey(s), cfg.allow_anonymous);
      if (!s.useTenant(tenant)) return;
    }
    const parts = s.path.split('/'); // ['', 'v1', 'files', id?, 'content'?]
    const methods = this.methodsOf(parts);
    // Own keys only: a method named like an Object.prototype member is not a handler.
    const handler = methods !== null && Object.hasOwn(methods, s.method) ? methods[s.method] : undefined;
    if (handler === undefined) {
      let r: LocalReply;
      if (methods === null) r = errorReply(Errors.routeNotFound, `no endpoint ${s.method} ${s.path}`);
      else {
        const allow = Object.keys(methods).join(', ');
        const message = `${s.method} is not allowed on ${s.path}; use ${allow}`;
        r = errorReply(JobErrors.methodNotAllowed, message, null, ['allow', allow]);
      }
      s.respond(r.status, r.headers, r.body);
      return;
    }
    const c: CallContext = {
      s,
      cfg,
      owner: tenant?.name ?? '',
      tenant,
      keepRunning: false,
      upload: null,
      id: parts[3] ?? '',
    };
    this.run(c, handler).then(
      (r) => s.respond(r.status, r.headers, r.body),
      (err: unknown) => {
        this.onStoreError(err);
        s.fail(Errors.internal, `batch API failure: ${err instanceof Error ? err.message : String(err)}`);
      },
    );
  }

  /** Applies `Idempotency-Key` around a POST handler, then runs it. */
  private async run(c: CallContext, handler: Handler): Promise<LocalReply> {
    const s = c.s;
    const key = s.method === 'POST' ? s.header('idempotency-key') : undefined;
    if (key === undefined) return this.guard(c, handler);
    if (key === '' || key.length > MAX_KEY_LENGTH) {
      return errorReply(
        JobErrors.invalidIdempotencyKey,
        `Idempotency-Key must be 1 to ${MAX_KEY_LENGTH} characters`,
        'Idempotency-Key',
      );
    }
    // Without a tenant the batch API knows nobody, but a route's plugin (auth-jwt) may: the key is
    // also scoped by the caller's credentials (a digest), so another or no credential never gets a
    // stored answer.
    const anonymous = c.tenant === null || c.tenant.anonymous;
    const credential = anonymous
      ? idempotencyCredential(s.header('authorization'), s.header('x-api-key'))
      : undefined;
    const scoped = scopeIdempotencyKey(c.owner, s.method, s.path, key, credential);
    const hash = await this.requestHash(c, handler);
    let begun;
    try {
      begun = await this.idempotency.begin(scoped, hash);
    } catch (err) {
      return this.storeFailure(err);
    }
    if (begun.kind === 'replay') {
      this.stats.replayed++;
      const r = begun.response;
      return {
        status: r.status,
        headers: [...flatten(r.headers), 'idempotent-replayed', 'true'],
        body: r.body,
      };
    }
    if (begun.kind === 'conflict') {
      this.stats.conflicts++;
      const running = begun.reason === 'in-progress';
      return errorReply(
        running ? JobErrors.idempotencyKeyInProgress : JobErrors.idempotencyKeyReused,
        running
          ? 'A request with this Idempotency-Key is still running; retry once it has finished.'
          : 'This Idempotency-Key was already used with a different request body.',
        'Idempotency-Key',
        ['x-should-retry', 'false'],
      );
    }
    c.keepRunning = true;
    let reply: LocalReply;
    try {
      reply = await this.guard(c, handler);
    } catch (err) {
      await this.idempotency.abandon(scoped);
      throw err;
    }
    try {
      // A 5xx says nothing happened that a retry should not redo; anything else is the answer.
      if (reply.status >= 500) await this.idempotency.abandon(scoped);
      else
        await this.idempotency.complete(scoped, {
          status: reply.status,
          headers: toRecord(reply.headers),
          body: reply.body,
        });
    } catch (err) {
      this.onStoreError(err);
    }
    return reply;
  }

  /**
   * What makes a retry "the same request" for `Idempotency-Key`: its bytes, except for an upload,
   * whose multipart boundary a client picks anew for every attempt: there, the form's fields.
   */
  private async requestHash(c: CallContext, handler: Handler): Promise<string> {
    const s = c.s;
    if (handler === this.uploadFile) {
      try {
        const u = (c.upload = await readUpload(s.header('content-type'), s.body));
        const fields = Buffer.from(`${u.purpose}\u0000${u.filename}\u0000`);
        const content = typeof u.content === 'string' ? Buffer.from(u.content) : u.content;
        return hashIdempotentRequest(s.method, s.path, Buffer.concat([fields, content]));
      } catch {
        // Not a readable form: the handler answers 400, and that answer is what a retry replays.
      }
    }
    return hashIdempotentRequest(s.method, s.path, s.body ?? Buffer.alloc(0));
  }

  /** Runs a handler; a `JobError` becomes its reply, any other failure of the store a 503. */
  private async guard(c: CallContext, handler: Handler): Promise<LocalReply> {
    try {
      return await handler(c);
    } catch (err) {
      if (err instanceof JobError) {
        return { status: err.kind.status, headers: [...JSON_HEADERS], body: JSON.stringify(err.toBody()) };
      }
      if (err instanceof SyncBatchInvalid) return errorReply(JobErrors.invalidBatch, err.message, err.param);
      return this.storeFailure(err);
    }
  }

  private storeFailure(err: unknown): LocalReply {
    this.stats.storeErrors++;
    this.onStoreError(err);
    return errorReply(
      JobErrors.storeUnavailable,
      `the batch store (${this.backend.kind}) is unavailable; retry shortly`,
      null,
      ['retry-after', '1'],
    );
  }

  /** The handlers of the path split into `parts`, by method; null: no such endpoint (404). */
  private methodsOf(parts: readonly string[]): Methods | null {
    const section = parts[2];
    const id = parts[3];
    const tail = parts[4];
    if (parts.length > 5 || id === '') return null;
    if (section === 'batch') return id === undefined ? this.routes.sync : null;
    if (section === 'files') {
      if (id === undefined) return this.routes.files;
      if (tail === undefined) return this.routes.file;
      return tail === 'content' ? this.routes.fileContent : null;
    }
    if (section === 'batches') {
      if (id === undefined) return this.routes.batches;
      if (tail === undefined) return this.routes.oneBatch;
      return tail === 'cancel' ? this.routes.cancel : null;
    }
    return null;
  }

  // ---- handlers (arrow fields: resolved once per instance, not per request) ----

  private readonly syncBatch: Handler = async (c) => {
    const s = c.s;
    if (s.body !== null && s.json() === null)
      throw new SyncBatchInvalid('the request body is not valid JSON', null);
    const request = parseSyncBatch(
      s.json(),
      { endpoints: c.cfg.endpoints, maxItems: c.cfg.sync.max_items },
      s.body === null ? null : s.body.toString('utf8'),
    );
    this.stats.syncItems += request.items.length;
    const headers: string[] = [];
    for (let i = 0; i < s.headers.length; i += 2) {
      if (!NOT_FOR_ITEMS.has(s.headers[i]!)) headers.push(s.headers[i]!, s.headers[i + 1]!);
    }
    const body = await new Promise<string>((resolve) => {
      const run = new SyncBatchRun(
        {
          host: s.host,
          plan: s.plan,
          tenant: c.tenant,
          hostName: s.hostName,
          headers,
          id: s.id,
          concurrency: c.cfg.sync.concurrency,
        },
        request,
        (done) => resolve(done.render()),
      );
      // With an idempotency key the result is kept for a retry, so the items finish even if the client leaves.
      if (!c.keepRunning) s.local = run;
      run.start();
    });
    return { status: 200, headers: [...JSON_HEADERS], body };
  };

  private readonly uploadFile: Handler = async (c) => {
    const upload = c.upload ?? (await readUpload(c.s.header('content-type'), c.s.body));
    const file = await this.backend.createFile(c.owner, upload);
    return json(200, file);
  };

  private readonly listFiles: Handler = async (c) =>
    json(200, await this.backend.listFiles(c.owner, listOptions(c.s.url)));

  private readonly getFile: Handler = async (c) => json(200, await this.backend.getFile(c.owner, c.id));

  private readonly deleteFile: Handler = async (c) => json(200, await this.backend.deleteFile(c.owner, c.id));

  private readonly fileContent: Handler = async (c) => ({
    status: 200,
    headers: ['content-type', 'application/jsonl'],
    body: await this.backend.fileContent(c.owner, c.id),
  });

  private readonly createBatch: Handler = async (c) => {
    const b = c.s.json();
    if (typeof b !== 'object' || b === null || Array.isArray(b)) {
      return errorReply(
        JobErrors.invalidRequest,
        'the body must be a JSON object with input_file_id, endpoint and completion_window',
      );
    }
    const body = b as Record<string, unknown>;
    for (const field of ['input_file_id', 'endpoint', 'completion_window'] as const) {
      if (typeof body[field] !== 'string')
        return errorReply(JobErrors.invalidRequest, `"${field}" must be a string`, field);
    }
    // The backend checks the endpoint and window against the same `batch_api` settings.
    const batch = await this.backend.createBatch(
      c.owner,
      {
        input_file_id: body['input_file_id'] as string,
        endpoint: body['endpoint'] as string,
        completion_window: body['completion_window'] as string,
        metadata: (body['metadata'] ?? null) as Record<string, string> | null,
      },
      batchOrigin(c.s),
    );
    return json(200, batch);
  };

  private readonly listBatches: Handler = async (c) =>
    json(200, await this.backend.listBatches(c.owner, listOptions(c.s.url)));

  private readonly getBatch: Handler = async (c) => json(200, await this.backend.getBatch(c.owner, c.id));

  private readonly cancelBatch: Handler = async (c) =>
    json(200, await this.backend.cancelBatch(c.owner, c.id));

  /** The method tables, built once (after the handler fields they name). */
  private readonly routes = {
    sync: { POST: this.syncBatch },
    files: { POST: this.uploadFile, GET: this.listFiles },
    file: { GET: this.getFile, DELETE: this.deleteFile },
    fileContent: { GET: this.fileContent },
    batches: { POST: this.createBatch, GET: this.listBatches },
    oneBatch: { GET: this.getBatch },
    cancel: { POST: this.cancelBatch },
  } as const satisfies Record<string, Methods>;
}

/** `after` and `limit` from the query string; a limit outside 1..100 is a `JobError` (400). */
function listOptions(url: string): ListOptions {
  const q = url.indexOf('?');
  if (q < 0) return {};
  const params = new URLSearchParams(url.slice(q + 1));
  const opts: ListOptions = {};
  const after = params.get('after');
  if (after !== null && after !== '') opts.after = after;
  const limit = params.get('limit');
  if (limit !== null) {
    const n = Number(limit);
    if (!Number.isInteger(n) || n < 1 || n > 100) {
      throw new JobError(
        JobErrors.invalidRequest,
        `limit must be an integer from 1 to 100 (got ${limit})`,
        'limit',
      );
    }
    opts.limit = n;
  }
  return opts;
}

/**
 * What a durable batch keeps of the request that creates it, for its items: the host, and the
 * headers some route of the current plan matches on (`match.headers`), credentials excepted.
 * Routes added by a later reload that match on other headers do not see them.
 */
function batchOrigin(s: Session): BatchOrigin {
  const names = new Set<string>();
  for (const r of s.plan.config.routes) {
    for (const name of Object.keys(r.match.headers ?? {})) {
      const n = name.toLowerCase();
      if (!NEVER_KEPT.has(n)) names.add(n);
    }
  }
  const headers: string[] = [];
  if (names.size > 0) {
    for (let i = 0; i < s.headers.length; i += 2) {
      if (names.has(s.headers[i]!)) headers.push(s.headers[i]!, s.headers[i + 1]!);
    }
  }
  return { host: s.hostName, headers };
}

function toRecord(flat: readonly string[]): StoredResponse['headers'] {
  const out: Record<string, string> = {};
  for (let i = 0; i < flat.length; i += 2) out[flat[i]!] = flat[i + 1]!;
  return out;
}

function flatten(headers: StoredResponse['headers']): string[] {
  const out: string[] = [];
  for (const [k, v] of Object.entries(headers)) out.push(k, v);
  return out;
}
