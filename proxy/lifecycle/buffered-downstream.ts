/**
 * A Downstream that keeps the response in memory instead of writing it to a socket: for the
 * requests Sluice makes to itself (a batch item, `batch-api/internal-request.ts`) and the batch API
 * requests the main thread answers for a worker thread's client (`runtime/endpoint-relay.ts`).
 * `status` is 0 until a head is written; `truncated` when the body was cut after the head (the
 * status then says success but the body is not whole).
 */
import type { Downstream } from './downstream.js';

export class BufferedDownstream implements Downstream {
  aborted = false;
  started = false;
  truncated = false;
  status = 0;
  /** Response headers, flat. */
  responseHeaders: readonly string[] = [];
  private chunks: Buffer[] = [];

  /** The whole response body. */
  body(): Buffer {
    return this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
  }

  reply(status: number, headers: readonly string[], body: string | Uint8Array): void {
    if (this.aborted) return;
    this.started = true;
    this.status = status;
    this.responseHeaders = headers;
    this.chunks.push(typeof body === 'string' ? Buffer.from(body) : Buffer.from(body));
  }

  start(status: number, headers: readonly string[]): void {
    if (this.aborted) return;
    this.started = true;
    this.status = status;
    this.responseHeaders = headers;
  }

  write(chunk: Uint8Array): boolean {
    if (!this.aborted) this.chunks.push(Buffer.from(chunk));
    return true;
  }

  end(): void {}

  closeWhenDone(): void {}

  destroy(): void {
    this.truncated = true;
  }

  abandonHead(): boolean {
    if (this.aborted || !this.started || this.chunks.length > 0) return false;
    this.started = false;
    this.status = 0;
    this.responseHeaders = [];
    return true;
  }
}
