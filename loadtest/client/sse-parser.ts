/**
 * An incremental Server-Sent Events parser for the client side of a stream: bytes in, the `data`
 * of each complete event out (multi-line data joined with `\n`, as the SSE spec says). Handles
 * events split across chunks, UTF-8 split across chunks, and LF, CRLF or CR line ends. Comments and
 * fields other than `data` are skipped.
 */

/** Feeds chunks; calls `onData` once per event that carried data. */
export class SseParser {
  private readonly decoder = new TextDecoder('utf-8');
  private buffer = '';
  private data: string[] = [];

  constructor(private readonly onData: (data: string) => void) {}

  /** Parses one chunk of the body. */
  push(chunk: Uint8Array): void {
    this.buffer += this.decoder.decode(chunk, { stream: true });
    let start = 0;
    for (;;) {
      const lf = this.buffer.indexOf('\n', start);
      const cr = this.buffer.indexOf('\r', start);
      let end: number;
      let next: number;
      if (cr >= 0 && (lf < 0 || cr < lf)) {
        // A CR at the very end may be the first half of a CRLF: wait for the next chunk.
        if (cr === this.buffer.length - 1) break;
        end = cr;
        next = this.buffer[cr + 1] === '\n' ? cr + 2 : cr + 1;
      } else if (lf >= 0) {
        end = lf;
        next = lf + 1;
      } else break;
      this.line(this.buffer.slice(start, end));
      start = next;
    }
    this.buffer = this.buffer.slice(start);
  }

  /**
   * The stream ended. A CR left at the very end is a line end after all (no LF can follow it), so
   * an event it completes is delivered; an unfinished line or event is dropped, as the SSE spec says.
   */
  end(): void {
    this.buffer += this.decoder.decode();
    if (this.buffer.endsWith('\r')) this.line(this.buffer.slice(0, -1));
    this.buffer = '';
  }

  private line(line: string): void {
    if (line === '') {
      if (this.data.length > 0) {
        const data = this.data.join('\n');
        this.data = [];
        this.onData(data);
      }
      return;
    }
    if (!line.startsWith('data')) return;
    if (line === 'data') this.data.push('');
    else if (line[4] === ':') this.data.push(line[5] === ' ' ? line.slice(6) : line.slice(5));
  }
}
