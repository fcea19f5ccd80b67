/**
 * Request body collection shared by both downstream engines: into one buffer sized from the
 * Content-Length, or as a list of chunks when the body is chunked, refused once it grows past the
 * listener's limit. A base class, so collecting adds no object per request.
 */
export abstract class BodyCollector {
  private bodyBuf: Buffer | null = null;
  private bodyChunks: Buffer[] | null = null;
  private bodyLength = 0;
  /** The body limit, bytes; -1 once the body was refused or given up (later bytes are ignored). */
  protected maxBody = 0;

  /** Starts collecting: `declared` is the Content-Length (-1 when chunked), `max` the limit. */
  protected startBody(declared: number, max: number): void {
    this.maxBody = max;
    if (declared > 0) this.bodyBuf = Buffer.allocUnsafe(declared);
    else this.bodyChunks = [];
  }

  /**
   * Adds body bytes. `copy` when the caller reclaims the chunk's memory after the call (uWS);
   * otherwise the chunk is kept as it is. Returns false, and gives the body up, when it grew past
   * the limit (or past its Content-Length).
   */
  protected addBody(chunk: Uint8Array, copy: boolean): boolean {
    // HOT
    const n = chunk.length;
    const buf = this.bodyBuf;
    if (this.bodyLength + n > (buf !== null ? buf.length : this.maxBody)) {
      this.giveUpBody();
      return false;
    }
    if (buf !== null) buf.set(chunk, this.bodyLength);
    else if (n > 0) this.bodyChunks!.push(copy ? Buffer.from(chunk) : (chunk as Buffer));
    this.bodyLength += n;
    return true;
  }

  /** The complete body (null when empty); collection is over. */
  protected takeBody(): Buffer | null {
    // HOT
    const buf = this.bodyBuf;
    let body: Buffer | null;
    if (buf !== null) body = this.bodyLength === buf.length ? buf : buf.subarray(0, this.bodyLength);
    else body = this.bodyLength === 0 ? null : Buffer.concat(this.bodyChunks!, this.bodyLength);
    this.bodyBuf = null;
    this.bodyChunks = null;
    return body;
  }

  /** Drops what was collected; later bytes are ignored. */
  protected giveUpBody(): void {
    this.maxBody = -1;
    this.bodyBuf = null;
    this.bodyChunks = null;
  }
}
