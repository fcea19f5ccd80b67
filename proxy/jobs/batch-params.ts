/**
 * The checks every job backend applies to the arguments of `createFile` and `createBatch` before
 * touching storage, so SQLite and Redis refuse the same requests with the same errors. Pure logic.
 */

import { parseBatchInput, type BatchInputLimits, type BatchInputLine } from './batch-input.js';
import { JobError, JobErrors } from './job-errors.js';
import type { CreateBatchParams, CreateFileParams } from './job-store.js';
import type { BatchErrorEntry } from './job-types.js';

/** What a backend accepts in `createFile` and `createBatch`: the options every backend takes. */
export interface BatchRuleOptions {
  /** Endpoints a batch may target. Default chat completions, completions, embeddings. */
  endpoints?: readonly string[];
  /** Accepted `completion_window` values and their length, ms. Default `{ '24h': 86,400,000 }`. */
  completionWindows?: Readonly<Record<string, number>>;
  /** Limits applied to uploaded JSONL. */
  inputLimits?: BatchInputLimits;
}

/** `BatchRuleOptions` with the defaults applied, as the checks below read them. */
export interface BatchRules {
  endpoints: ReadonlySet<string>;
  /** `completion_window` name → length, ms. */
  windows: Readonly<Record<string, number>>;
  limits: BatchInputLimits;
}

const DEFAULT_ENDPOINTS = ['/v1/chat/completions', '/v1/completions', '/v1/embeddings'];
const DEFAULT_WINDOWS: Readonly<Record<string, number>> = { '24h': 86_400_000 };

/** The rules of `opts`, defaults filled in. Called once when a backend is created. */
export function batchRules(opts: BatchRuleOptions): BatchRules {
  return {
    endpoints: new Set(opts.endpoints ?? DEFAULT_ENDPOINTS),
    windows: opts.completionWindows ?? DEFAULT_WINDOWS,
    limits: opts.inputLimits ?? {},
  };
}

/**
 * Checks an upload: `purpose` must be `batch` and every JSONL line valid. Returns the content as
 * bytes; throws `JobError` (400) naming the field or the bad line.
 */
export function checkUpload(params: CreateFileParams, limits: BatchInputLimits): Buffer {
  if (params.purpose !== 'batch') {
    throw new JobError(
      JobErrors.invalidRequest,
      `purpose "${params.purpose}" is not supported; use "batch"`,
      'purpose',
    );
  }
  const content = typeof params.content === 'string' ? Buffer.from(params.content) : params.content;
  parseBatchInput(content.toString('utf8'), limits);
  return content;
}

/** What `checkBatchParams` accepted. */
export interface CheckedBatchParams {
  /** Length of the completion window, ms. */
  windowMs: number;
  metadata: Record<string, string> | null;
}

/**
 * Checks the arguments of a batch whose input file has kind `fileKind`: an uploaded file, an
 * endpoint and a window the rules accept, metadata mapping keys to strings. Throws `JobError` (400)
 * naming the field.
 */
export function checkBatchParams(
  params: CreateBatchParams,
  fileKind: string,
  rules: BatchRules,
): CheckedBatchParams {
  if (fileKind !== 'upload') {
    throw new JobError(
      JobErrors.invalidRequest,
      'input_file_id must be a file uploaded with purpose "batch"',
      'input_file_id',
    );
  }
  if (!rules.endpoints.has(params.endpoint)) {
    throw new JobError(
      JobErrors.invalidRequest,
      `endpoint "${params.endpoint}" is not supported; use one of ${[...rules.endpoints].join(', ')}`,
      'endpoint',
    );
  }
  const windowMs = rules.windows[params.completion_window];
  if (windowMs === undefined) {
    throw new JobError(
      JobErrors.invalidRequest,
      `completion_window "${params.completion_window}" is not supported`,
      'completion_window',
    );
  }
  const metadata = params.metadata ?? null;
  if (metadata !== null) checkMetadata(metadata);
  return { windowMs, metadata };
}

/**
 * The lines whose `url` differs from the batch's `endpoint` (at most 100), as OpenAI batch errors;
 * a batch with any is created with status `failed`.
 */
export function endpointMismatches(lines: readonly BatchInputLine[], endpoint: string): BatchErrorEntry[] {
  const errors: BatchErrorEntry[] = [];
  for (const l of lines) {
    if (l.url !== endpoint && errors.length < 100) {
      errors.push({
        code: 'mismatched_endpoint',
        message: `url ${l.url} differs from the batch endpoint`,
        param: 'url',
        line: l.line,
      });
    }
  }
  return errors;
}

/** OpenAI's limits on `metadata`: at most 16 keys, keys up to 64 characters, values up to 512. */
const METADATA_KEYS = 16;
const METADATA_KEY_CHARS = 64;
const METADATA_VALUE_CHARS = 512;

/** Throws `JobError` (400, param `metadata`) unless `metadata` is a mapping of keys to strings within OpenAI's limits. */
function checkMetadata(metadata: unknown): asserts metadata is Record<string, string> {
  const bad = (why: string): never => {
    throw new JobError(JobErrors.invalidRequest, `metadata ${why}`, 'metadata');
  };
  if (typeof metadata !== 'object' || metadata === null || Array.isArray(metadata))
    bad('must be an object mapping keys to strings');
  const entries = Object.entries(metadata as Record<string, unknown>);
  if (entries.length > METADATA_KEYS) bad(`has ${entries.length} keys; at most ${METADATA_KEYS} are allowed`);
  for (const [key, value] of entries) {
    if (typeof value !== 'string') bad(`must map keys to strings (${JSON.stringify(key)} is not a string)`);
    if (key.length > METADATA_KEY_CHARS) bad(`keys may be at most ${METADATA_KEY_CHARS} characters`);
    if ((value as string).length > METADATA_VALUE_CHARS)
      bad(`values may be at most ${METADATA_VALUE_CHARS} characters (${JSON.stringify(key)})`);
  }
}
