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
import { JobError, JobErrors } from '../jobs/job-errors.js';
import {
  hashIdempotentRequest,
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

function json(status: number, value: unknown): LocalReply {
  return { status, headers: [...JSON_HEADERS], body: JSON.stringify(value) };
}

function errorReply(
  status: number,
  type: string,
  code: string,
  message: string,
  param: string | null = null,
  extra: string[] = [],
): LocalReply {
  return {
    status,
    headers: [...JSON_HEADERS, ...extra],
    body: JSON.stringify({ error: { message, type, param, code } }),
  };
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

  handle(s: Session): void {
    this.stats.requests++;
    const cfg = s.plan.config.batch_api!;
    const table = s.plan.tenants.table;
    let tenant: Tenant | null = null;
    if (table !== null) {
      tenant = table.authenticate(extractApiKey(s), cfg.allow_anonymous);
      if (!s.useTenant(tenant)) return;
    }
    const resolved = this.resolve(s.method, s.path);
    if (typeof resolved === 'string') {
      const r = resolved.startsWith('allow:')
        ? errorReply(
            405,
            'invalid_request_error',
            'method_not_allowed',
            `${s.method} is not allowed on ${s.path}; use ${resolved.slice(6)}`,
            null,
            ['allow', resolved.slice(6)],
          )
        : errorReply(404, 'invalid_request_error', 'route_not_found', `no endpoint ${s.method} ${s.path}`);
      s.respond(r.status, r.headers, r.body);
      return;
    }
    const c: CallContext = { s, cfg, owner: tenant?.name ?? '', tenant, keepRunning: false, id: resolved.id };
    this.run(c, resolved.handler).then(
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
        400,
        'invalid_request_error',
        'invalid_idempotency_key',
        `Idempotency-Key must be 1 to ${MAX_KEY_LENGTH} characters`,
        'Idempotency-Key',
      );
    }
    const scoped = scopeIdempotencyKey(c.owner, s.method, s.path, key);
    const hash = hashIdempotentRequest(s.method, s.path, s.body ?? Buffer.alloc(0));
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
      const message =
        begun.reason === 'in-progress'
          ? 'A request with this Idempotency-Key is still running; retry once it has finished.'
          : 'This Idempotency-Key was already used with a different request body.';
      return errorReply(
        409,
        'invalid_request_error',
        begun.reason === 'in-progress' ? 'idempotency_key_in_progress' : 'idempotency_key_reused',
        message,
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

  /** Runs a handler; a `JobError` becomes its reply, any other failure of the store a 503. */
  private async guard(c: CallContext, handler: Handler): Promise<LocalReply> {
    try {
      return await handler(c);
    } catch (err) {
      if (err instanceof JobError) {
        return { status: err.kind.status, headers: [...JSON_HEADERS], body: JSON.stringify(err.toBody()) };
      }
      if (err instanceof SyncBatchInvalid) {
        return errorReply(400, 'invalid_request_error', 'invalid_batch', err.message, err.param);
      }
      return this.storeFailure(err);
    }
  }

  private storeFailure(err: unknown): LocalReply {
    this.stats.storeErrors++;
    this.onStoreError(err);
    return errorReply(
      503,
      'server_error',
      'batch_store_unavailable',
      `the batch store (${this.backend.kind}) is unavailable; retry shortly`,
      null,
      ['retry-after', '1'],
    );
  }

  /** The handler for `method path`, or `allow:<methods>` (405) / `none` (404). */
  private resolve(method: string, path: string): { handler: Handler; id: string } | string {
    const parts = path.split('/'); // ['', 'v1', 'files', id?, 'content'?]
    const section = parts[2];
    const id = parts[3] ?? '';
    const tail = parts[4];
    if (parts.length > 5 || (parts.length === 4 && id === '')) return 'none';
    const pick = (table: Record<string, Handler>): { handler: Handler; id: string } | string => {
      const h = table[method];
      return h === undefined ? `allow:${Object.keys(table).join(', ')}` : { handler: h, id };
    };
    if (section === 'batch') return parts.length === 3 ? pick({ POST: this.syncBatch }) : 'none';
    if (section === 'files') {
      if (parts.length === 3) return pick({ POST: this.uploadFile, GET: this.listFiles });
      if (tail === undefined) return pick({ GET: this.getFile, DELETE: this.deleteFile });
      return tail === 'content' ? pick({ GET: this.fileContent }) : 'none';
    }
    if (section === 'batches') {
      if (parts.length === 3) return pick({ POST: this.createBatch, GET: this.listBatches });
      if (tail === undefined) return pick({ GET: this.getBatch });
      return tail === 'cancel' ? pick({ POST: this.cancelBatch }) : 'none';
    }
    return 'none';
  }

  // ---- handlers (arrow fields: resolved once per instance, not per request) ----

  private readonly syncBatch: Handler = async (c) => {
    const s = c.s;
    if (s.body !== null && s.json() === null)
      throw new SyncBatchInvalid('the request body is not valid JSON', null);
    const request = parseSyncBatch(s.json(), {
      endpoints: c.cfg.endpoints,
      maxItems: c.cfg.sync.max_items,
    });
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
    const upload = await readUpload(c.s.header('content-type'), c.s.body);
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
        400,
        'invalid_request_error',
        'invalid_request',
        'the body must be a JSON object with input_file_id, endpoint and completion_window',
      );
    }
    const body = b as Record<string, unknown>;
    for (const field of ['input_file_id', 'endpoint', 'completion_window'] as const) {
      if (typeof body[field] !== 'string') {
        return errorReply(
          400,
          'invalid_request_error',
          'invalid_request',
          `"${field}" must be a string`,
          field,
        );
      }
    }
    const endpoint = body['endpoint'] as string;
    if (!c.cfg.endpoints.includes(endpoint)) {
      return errorReply(
        400,
        'invalid_request_error',
        'invalid_request',
        `endpoint "${endpoint}" is not supported; use one of ${c.cfg.endpoints.join(', ')}`,
        'endpoint',
      );
    }
    const batch = await this.backend.createBatch(c.owner, {
      input_file_id: body['input_file_id'] as string,
      endpoint,
      completion_window: body['completion_window'] as string,
      metadata: (body['metadata'] ?? null) as Record<string, string> | null,
    });
    return json(200, batch);
  };

  private readonly listBatches: Handler = async (c) =>
    json(200, await this.backend.listBatches(c.owner, listOptions(c.s.url)));

  private readonly getBatch: Handler = async (c) => json(200, await this.backend.getBatch(c.owner, c.id));

  private readonly cancelBatch: Handler = async (c) =>
    json(200, await this.backend.cancelBatch(c.owner, c.id));
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
