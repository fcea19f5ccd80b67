/**
 * The checks every job backend applies to the arguments of `createFile` and `createBatch` before
 * touching storage, so SQLite and Redis refuse the same requests with the same errors. Pure logic.
 */

import { parseBatchInput, type BatchInputLimits, type BatchInputLine } from './batch-input.js';
import { JobError, JobErrors } from './job-errors.js';
import type { CreateBatchParams, CreateFileParams } from './job-store.js';
import type { BatchErrorEntry } from './job-types.js';

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
 * endpoint in `endpoints`, a window in `windows` (name → ms), metadata mapping keys to strings.
 * Throws `JobError` (400) naming the field.
 */
export function checkBatchParams(
  params: CreateBatchParams,
  fileKind: string,
  endpoints: ReadonlySet<string>,
  windows: Readonly<Record<string, number>>,
): CheckedBatchParams {
  if (fileKind !== 'upload') {
    throw new JobError(
      JobErrors.invalidRequest,
      'input_file_id must be a file uploaded with purpose "batch"',
      'input_file_id',
    );
  }
  if (!endpoints.has(params.endpoint)) {
    throw new JobError(
      JobErrors.invalidRequest,
      `endpoint "${params.endpoint}" is not supported`,
      'endpoint',
    );
  }
  const windowMs = windows[params.completion_window];
  if (windowMs === undefined) {
    throw new JobError(
      JobErrors.invalidRequest,
      `completion_window "${params.completion_window}" is not supported`,
      'completion_window',
    );
  }
  const metadata = params.metadata ?? null;
  if (
    metadata !== null &&
    (typeof metadata !== 'object' || Object.values(metadata).some((v) => typeof v !== 'string'))
  ) {
    throw new JobError(JobErrors.invalidRequest, 'metadata must map keys to strings', 'metadata');
  }
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
