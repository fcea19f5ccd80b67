/**
 * The OpenAI-compatible shapes of the batch API (file objects, batch objects, statuses, request
 * counts, output lines) and the item a worker executes. Types only, plus the status set.
 */

/** OpenAI batch statuses, in the order a batch can move through them. */
export const BatchStatus = {
  validating: 'validating',
  failed: 'failed',
  inProgress: 'in_progress',
  finalizing: 'finalizing',
  completed: 'completed',
  expired: 'expired',
  cancelling: 'cancelling',
  cancelled: 'cancelled',
} as const;
export type BatchStatus = (typeof BatchStatus)[keyof typeof BatchStatus];

/** Statuses a batch never leaves. */
export const TERMINAL_STATUSES: ReadonlySet<BatchStatus> = new Set<BatchStatus>([
  'failed',
  'completed',
  'expired',
  'cancelled',
]);

/** `request_counts` of a batch: `completed + failed <= total`, equal once the batch is terminal. */
export interface RequestCounts {
  total: number;
  completed: number;
  failed: number;
}

/** One validation error of a batch or an upload (OpenAI `errors.data[]`). `line` is 1-based. */
export interface BatchErrorEntry {
  code: string;
  message: string;
  param: string | null;
  line: number | null;
}

/** OpenAI file object. */
export interface FileObject {
  id: string;
  object: 'file';
  /** Size of the content, bytes. */
  bytes: number;
  /** s since the epoch. */
  created_at: number;
  filename: string;
  /** `batch` for uploads, `batch_output` for output and error files. */
  purpose: string;
  status: 'processed';
}

/** OpenAI batch object. Every `*_at` field is seconds since the epoch, or null. */
export interface BatchObject {
  id: string;
  object: 'batch';
  endpoint: string;
  errors: { object: 'list'; data: BatchErrorEntry[] } | null;
  input_file_id: string;
  completion_window: string;
  status: BatchStatus;
  output_file_id: string | null;
  error_file_id: string | null;
  created_at: number;
  in_progress_at: number | null;
  expires_at: number;
  finalizing_at: number | null;
  completed_at: number | null;
  failed_at: number | null;
  expired_at: number | null;
  cancelling_at: number | null;
  cancelled_at: number | null;
  request_counts: RequestCounts;
  metadata: Record<string, string> | null;
}

/** A page of a list endpoint, OpenAI cursor style. */
export interface ListPage<T> {
  object: 'list';
  data: T[];
  first_id: string | null;
  last_id: string | null;
  has_more: boolean;
}

/** One line of an output or error file. */
export interface OutputLine {
  /** `batch_req_<item id>`. */
  id: string;
  custom_id: string;
  response: { status_code: number; request_id: string; body: unknown } | null;
  error: { code: string; message: string } | null;
}

/** One request of a batch, as a worker receives it. */
export interface JobItem {
  /** Item id, unique in the database; results are keyed by it. */
  id: number;
  batchId: string;
  /** Tenant that owns the batch ('' without tenants); the executor dispatches the item as this tenant. */
  owner: string;
  /**
   * Host (lower-case, without port) of the request that created the batch: the item runs as if
   * sent to it, so host-matched routes match. `localhost` for a batch stored before hosts were kept.
   */
  host: string;
  /**
   * The creating request's headers that routes match on (`match.headers`), flat `[name, value, ...]`,
   * lower-case names; never credentials. Empty for a batch stored before they were kept.
   */
  headers: readonly string[];
  /** 0-based position in the input file. */
  index: number;
  customId: string;
  method: string;
  /** Path of the endpoint, e.g. `/v1/embeddings`. */
  url: string;
  /** The request body as JSON text: the executor forwards it as is. */
  body: string;
  /** How many times the item has been claimed, this claim included. */
  attempts: number;
}

/** What executing one item produced: the upstream's HTTP status and parsed body. */
export interface ItemResult {
  status: number;
  body: unknown;
}
