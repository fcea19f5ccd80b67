/**
 * Capturing a request head out of uWS's HttpRequest: the 15 headers an OpenAI SDK sends with a
 * chat completion. The HttpRequest is a stand-in with the same methods (the real one exists only
 * inside a uWS handler). And reading a node's response head as undici hands it over (views into
 * the read that held it).
 */
import type { HttpRequest } from 'uWebSockets.js';
import { readResponseHead } from '../../proxy/lifecycle/headers.js';
import { captureHead } from '../../proxy/server/request-head.js';
import { CHAT_BODY, SDK_HEADERS } from './bench-fixtures.js';
import type { MicroBenchmark } from './micro-benchmark.js';

/** The parts of uWS's HttpRequest that `captureHead` reads, over fixed values. */
class StandInRequest {
  constructor(
    private readonly method: string,
    private readonly url: string,
    private readonly query: string | undefined,
    private readonly headers: readonly string[],
  ) {}

  getCaseSensitiveMethod(): string {
    return this.method;
  }

  getMethod(): string {
    return this.method.toLowerCase();
  }

  getUrl(): string {
    return this.url;
  }

  getQuery(): string | undefined {
    return this.query;
  }

  getHeader(name: string): string {
    const h = this.headers;
    for (let i = 0; i < h.length; i += 2) if (h[i] === name) return h[i + 1]!;
    return '';
  }

  forEach(cb: (key: string, value: string) => void): void {
    const h = this.headers;
    for (let i = 0; i < h.length; i += 2) cb(h[i]!, h[i + 1]!);
  }
}

export const benchmarks: MicroBenchmark[] = [
  {
    name: 'server: capture head, 15 headers (OpenAI SDK chat request)',
    setup() {
      const headers = [
        'host',
        'sluice.example:8080',
        ...SDK_HEADERS,
        'content-length',
        String(Buffer.byteLength(CHAT_BODY)),
        'connection',
        'keep-alive',
      ];
      const req = new StandInRequest(
        'POST',
        '/v1/chat/completions',
        undefined,
        headers,
      ) as unknown as HttpRequest;
      const head = captureHead(req, '127.0.0.1');
      if (head.framingError !== null) throw new Error(head.framingError);
      return () => captureHead(req, '127.0.0.1');
    },
  },
  {
    name: 'lifecycle: read response head, 5 headers (vLLM chat answer)',
    setup() {
      // What vLLM (uvicorn) sends before a JSON answer, as one socket read.
      const lines = [
        'date: Wed, 25 Nov 2026 10:00:00 GMT',
        'server: uvicorn',
        'content-length: 578',
        'content-type: application/json',
        'x-request-id: chatcmpl-5f0c2a',
      ];
      const read = Buffer.from(`HTTP/1.1 200 OK\r\n${lines.join('\r\n')}\r\n\r\n`, 'latin1');
      const raw: Buffer[] = [];
      let at = read.indexOf('\r\n') + 2;
      for (const line of lines) {
        const colon = line.indexOf(':');
        raw.push(read.subarray(at, at + colon), read.subarray(at + colon + 2, at + line.length));
        at += line.length + 2;
      }
      return () => readResponseHead(raw, 'req-1');
    },
  },
];
