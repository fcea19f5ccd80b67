/**
 * The errors of the batch API and its stores: each has a stable code, the HTTP status the wiring
 * should send and the OpenAI error `type`/`code`. Nothing here writes HTTP.
 */

/** One kind of job error. */
export interface JobErrorKind {
  /** Stable identifier, `SLUICE_JOBS_<WHAT>`. */
  readonly id: string;
  /** HTTP status the endpoint sends. */
  readonly status: number;
  /** OpenAI error `type`. */
  readonly type: string;
  /** OpenAI error `code`. */
  readonly code: string;
}

function kind(id: string, status: number, type: string, code: string): JobErrorKind {
  return Object.freeze({ id, status, type, code });
}

/** The catalogue of job errors. Codes are stable once released. */
export const JobErrors = {
  invalidFile: kind('SLUICE_JOBS_INVALID_FILE', 400, 'invalid_request_error', 'invalid_file'),
  invalidRequest: kind('SLUICE_JOBS_INVALID_REQUEST', 400, 'invalid_request_error', 'invalid_request'),
  fileNotFound: kind('SLUICE_JOBS_FILE_NOT_FOUND', 404, 'invalid_request_error', 'file_not_found'),
  batchNotFound: kind('SLUICE_JOBS_BATCH_NOT_FOUND', 404, 'invalid_request_error', 'batch_not_found'),
  cannotCancel: kind('SLUICE_JOBS_CANNOT_CANCEL', 409, 'invalid_request_error', 'batch_not_cancellable'),
  fileInUse: kind('SLUICE_JOBS_FILE_IN_USE', 409, 'invalid_request_error', 'file_in_use'),
  /** A `POST /v1/batch` body that is malformed as a whole. */
  invalidBatch: kind('SLUICE_JOBS_INVALID_BATCH', 400, 'invalid_request_error', 'invalid_batch'),
  methodNotAllowed: kind(
    'SLUICE_JOBS_METHOD_NOT_ALLOWED',
    405,
    'invalid_request_error',
    'method_not_allowed',
  ),
  invalidIdempotencyKey: kind(
    'SLUICE_JOBS_IDEMPOTENCY_KEY_INVALID',
    400,
    'invalid_request_error',
    'invalid_idempotency_key',
  ),
  idempotencyKeyReused: kind(
    'SLUICE_JOBS_IDEMPOTENCY_KEY_REUSED',
    409,
    'invalid_request_error',
    'idempotency_key_reused',
  ),
  idempotencyKeyInProgress: kind(
    'SLUICE_JOBS_IDEMPOTENCY_KEY_IN_PROGRESS',
    409,
    'invalid_request_error',
    'idempotency_key_in_progress',
  ),
  /** The job or idempotency store failed (disk, Redis down): retry shortly. */
  storeUnavailable: kind('SLUICE_JOBS_STORE_UNAVAILABLE', 503, 'server_error', 'batch_store_unavailable'),
} as const;

/**
 * Thrown by a job backend for a request the caller got wrong (bad JSONL, unknown id, cancel of a
 * finished batch, deleting a file a running batch reads). `line` is the 1-based JSONL line at
 * fault, when there is one.
 */
export class JobError extends Error {
  override readonly name = 'JobError';

  constructor(
    readonly kind: JobErrorKind,
    message: string,
    readonly param: string | null = null,
    readonly line: number | null = null,
  ) {
    super(message);
  }

  /** The OpenAI-shaped error body: `{error: {message, type, code, param, line}}`. */
  toBody(): {
    error: { message: string; type: string; code: string; param: string | null; line: number | null };
  } {
    return {
      error: {
        message: this.message,
        type: this.kind.type,
        code: this.kind.code,
        param: this.param,
        line: this.line,
      },
    };
  }
}
