/**
 * audit-log: one JSON line per request — time, request id, tenant, route, pool, node, model,
 * status, tokens, latency, rejection reason — to stdout or to a file rotated by size. Never keys
 * (headers are not logged) and never bodies unless `include_bodies` is set; then the request body
 * and the first `max_body_bytes` of the answer are kept (the answer is copied as it streams, never
 * held back). Writing is asynchronous and off the response path: lines are queued, and a full queue
 * drops lines (counted) rather than slowing requests.
 */
import { createWriteStream, type WriteStream } from 'node:fs';
import { open as openFile, rename } from 'node:fs/promises';
import { resolve } from 'node:path';
import { definePlugin, type PluginRequest } from '../api.js';

interface Options {
  /** `-` for stdout, else a file (relative to the config file). */
  path: string;
  max_bytes: number;
  max_files: number;
  include_bodies: boolean;
  max_body_bytes: number;
  /** Most lines waiting to be written before new ones are dropped. */
  max_queue: number;
}

/** The answer copied for include_bodies. */
interface Captured {
  parts: Buffer[];
  bytes: number;
}

/** How long after the file failed it is opened again, ms. */
const REOPEN_AFTER_MS = 1000;

/** Appends lines to a file, rotating it to `.1`, `.2`, ... past `maxBytes`. */
class RotatingFile {
  private stream: WriteStream | null = null;
  private bytes = 0;
  private queue: string[] = [];
  private rotating = false;
  /**
   * Monotonic ms when the stream failed (the disk, the directory), or -1: lines are then dropped,
   * and counted, and the file is opened again a second later.
   */
  private brokenAt = -1;

  constructor(
    private readonly file: string,
    private readonly maxBytes: number,
    private readonly maxFiles: number,
    private readonly onError: (e: unknown) => void,
  ) {}

  private open(): WriteStream {
    const s = createWriteStream(this.file, { flags: 'a' });
    this.brokenAt = -1;
    s.on('error', (e) => {
      // Only the current stream's failure stops the writes (a replaced one may fail late).
      if (this.stream === s || this.stream === null) this.brokenAt = performance.now();
      this.onError(e);
    });
    return s;
  }

  /**
   * Opens the file for appending, taking its size; throws (so `create` fails and the config is
   * refused) when it cannot be written: a missing directory, no permission.
   */
  async init(): Promise<void> {
    let fh;
    try {
      fh = await openFile(this.file, 'a');
      this.bytes = (await fh.stat()).size;
    } catch (e) {
      throw new Error(
        `cannot write the audit log ${this.file}: ${e instanceof Error ? e.message : String(e)}`,
      );
    } finally {
      await fh?.close();
    }
    this.stream = this.open();
  }

  get pending(): number {
    return this.queue.length;
  }

  /** Appends `line`; false when it was dropped (the file failed). */
  write(line: string): boolean {
    if (this.brokenAt >= 0) {
      if (this.rotating || performance.now() - this.brokenAt < REOPEN_AFTER_MS) return false;
      this.stream?.destroy();
      this.stream = this.open();
      this.bytes = 0;
    }
    if (this.rotating) {
      this.queue.push(line);
      return true;
    }
    this.stream!.write(line);
    this.bytes += Buffer.byteLength(line);
    if (this.bytes >= this.maxBytes) void this.rotate();
    return true;
  }

  private async rotate(): Promise<void> {
    this.rotating = true;
    const old = this.stream!;
    await new Promise<void>((r) => old.end(r));
    try {
      for (let i = this.maxFiles - 1; i >= 1; i--) {
        await rename(`${this.file}.${i}`, `${this.file}.${i + 1}`).catch(() => undefined);
      }
      await rename(this.file, `${this.file}.1`);
    } catch (e) {
      this.onError(e);
    }
    this.stream = this.open();
    this.bytes = 0;
    this.rotating = false;
    const q = this.queue;
    this.queue = [];
    for (const line of q) this.write(line);
  }

  async close(): Promise<void> {
    while (this.rotating) await new Promise((r) => setTimeout(r, 5));
    const s = this.stream;
    if (s !== null) await new Promise<void>((r) => s.end(r));
  }
}

function modelOf(req: PluginRequest): string | null {
  const b = req.json();
  if (typeof b !== 'object' || b === null) return null;
  const m = (b as { model?: unknown }).model;
  return typeof m === 'string' ? m : null;
}

export default definePlugin<Options>({
  name: 'audit-log',
  version: '1.0.0',
  options: {
    type: 'object',
    additionalProperties: false,
    properties: {
      path: { type: 'string', minLength: 1, default: '-' },
      max_bytes: { type: 'integer', minimum: 1024, default: 104857600 },
      max_files: { type: 'integer', minimum: 1, maximum: 1000, default: 5 },
      include_bodies: { type: 'boolean', default: false },
      max_body_bytes: { type: 'integer', minimum: 0, default: 65536 },
      max_queue: { type: 'integer', minimum: 1, default: 10000 },
    },
  },
  async create(options, context) {
    const dropped = context.metrics.counter(
      'sluice_plugin_audit_log_dropped_total',
      'Audit lines dropped because the writer fell behind or the file could not be written.',
      ['plugin'],
    );
    let file: RotatingFile | null = null;
    if (options.path !== '-') {
      file = new RotatingFile(
        resolve(context.configDir, options.path),
        options.max_bytes,
        options.max_files,
        (e) => context.log.error(`cannot write the audit log: ${String(e)}`),
      );
      await file.init();
    }
    const write = (line: string): void => {
      if (file === null) {
        process.stdout.write(line);
        return;
      }
      if (file.pending >= options.max_queue || !file.write(line)) dropped.inc(1, context.name);
    };
    const limit = options.max_body_bytes;
    return {
      ...(options.include_bodies
        ? {
            onResponseChunk(req: PluginRequest, chunk: Buffer | null) {
              if (chunk === null) return;
              let c = req.state as Captured | undefined;
              if (c === undefined) req.state = c = { parts: [], bytes: 0 };
              if (c.bytes >= limit) return;
              const part = chunk.subarray(0, limit - c.bytes);
              c.parts.push(Buffer.from(part));
              c.bytes += part.length;
            },
          }
        : {}),
      onDone(req: PluginRequest) {
        const u = req.usage;
        const entry: Record<string, unknown> = {
          time: new Date(context.clock.wallMs()).toISOString(),
          request_id: req.id,
          listener: req.listener,
          method: req.method,
          path: req.path,
          tenant: req.tenant,
          route: req.route,
          pool: req.pool,
          node: req.node,
          model: modelOf(req),
          status: req.status,
          attempts: req.attempt,
          prompt_tokens: u?.prompt ?? null,
          completion_tokens: u?.completion ?? null,
          total_tokens: u?.total ?? null,
          latency_ms: Math.round(req.durationMs * 1000) / 1000,
          ttfb_ms: req.ttfbMs < 0 ? null : Math.round(req.ttfbMs * 1000) / 1000,
          bytes_out: req.bytesOut,
          error: req.errorCode,
          tags: req.tags,
        };
        if (options.include_bodies) {
          entry['request_body'] = req.body === null ? null : req.body.toString('utf8', 0, limit);
          const c = req.state as Captured | undefined;
          entry['response_body'] = c === undefined ? null : Buffer.concat(c.parts).toString('utf8');
        }
        write(`${JSON.stringify(entry)}\n`);
      },
      async close() {
        await file?.close();
      },
    };
  },
});
