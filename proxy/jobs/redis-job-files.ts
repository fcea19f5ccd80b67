/**
 * Files of the Redis batch-job backend: uploads (validated, stored with their content) and the
 * output and error files a batch gets when it ends (rendered from its results on every read, their
 * size measured once). Every call is scoped to an owner: another owner's file is not found. It
 * never touches the queue.
 */

import { newId } from './batch-files.js';
import { checkUpload } from './batch-params.js';
import type { BatchInputLimits } from './batch-input.js';
import type { ListOptions } from './job-backend.js';
import { JobError, JobErrors } from './job-errors.js';
import type { CreateFileParams } from './job-store.js';
import type { FileObject, ListPage } from './job-types.js';
import { CREATE_FILE, DELETE_FILE, FILE_BYTES } from './redis-job-batch-scripts.js';
import type { RedisJobConnection } from './redis-job-connection.js';
import { DELETED_FILE_CURSOR_TTL_MS, pageSize, toPage } from './list-page.js';
import { pageIds } from './redis-job-lists.js';
import { renderResultLines } from './redis-job-results.js';

const FILE_FIELDS = ['id', 'owner', 'purpose', 'filename', 'bytes', 'created_at', 'kind', 'batch_id'];

/** A file hash as read with `HMGET FILE_FIELDS` (`bytes` is null until an output file is measured). */
export interface FileFields {
  id: string;
  owner: string;
  purpose: string;
  filename: string;
  bytes: string | null;
  created_at: string;
  /** `upload`, `output` or `error`. */
  kind: string;
  batch_id: string | null;
}

function readFile(row: (string | null)[]): FileFields | null {
  const [id, owner, purpose, filename, bytes, createdAt, kind, batchId] = row;
  if (id === null || id === undefined || owner === null || owner === undefined) return null;
  return {
    id,
    owner,
    purpose: purpose ?? '',
    filename: filename ?? '',
    bytes: bytes ?? null,
    created_at: createdAt ?? '0',
    kind: kind ?? 'upload',
    batch_id: batchId ?? null,
  };
}

/** The file side of `RedisJobBackend`; it has the same method contracts as `JobBackend`'s. */
export class RedisJobFiles {
  constructor(
    private readonly conn: RedisJobConnection,
    private readonly limits: BatchInputLimits,
    private readonly chunk: number,
  ) {}

  /** See `JobBackend.createFile`. */
  async create(owner: string, params: CreateFileParams): Promise<FileObject> {
    const content = checkUpload(params, this.limits);
    const id = newId('file-');
    const nowS = Math.floor(this.conn.clock() / 1000);
    await this.conn.run(CREATE_FILE, [
      id,
      owner,
      params.filename,
      String(content.length),
      String(nowS),
      content,
    ]);
    return {
      id,
      object: 'file',
      bytes: content.length,
      created_at: nowS,
      filename: params.filename,
      purpose: 'batch',
      status: 'processed',
    };
  }

  /** See `JobBackend.getFile`. */
  async get(owner: string, id: string): Promise<FileObject> {
    return this.toFile(await this.fields(owner, id));
  }

  /** See `JobBackend.listFiles`. */
  async list(owner: string, opts: ListOptions = {}): Promise<ListPage<FileObject>> {
    const limit = pageSize(opts);
    const keys = this.conn.keys;
    const ids = await pageIds(this.conn, keys.files(owner), opts.after, limit, {
      what: 'file',
      owner,
      gone: (id) => keys.fileGone(id),
    });
    const rows = await Promise.all(
      ids.map((id) => this.conn.send<(string | null)[]>(['HMGET', this.conn.keys.file(id), ...FILE_FIELDS])),
    );
    const files: FileObject[] = [];
    for (const row of rows) {
      const f = readFile(row);
      // A file deleted between the two reads is left out.
      if (f !== null && f.owner === owner) files.push(await this.toFile(f));
    }
    return toPage(files, limit);
  }

  /** See `JobBackend.fileContent`. */
  async content(owner: string, id: string): Promise<string> {
    const f = await this.fields(owner, id);
    let lines: string[];
    if (f.kind === 'upload') {
      lines = (await this.uploadText(id)).split('\n').filter((l) => l !== '');
    } else {
      lines = await this.render(f.batch_id ?? '', f.kind === 'output' ? 'output' : 'error');
    }
    let out = '';
    for (const line of lines) out += line + '\n';
    return out;
  }

  /** See `JobBackend.deleteFile`. */
  async delete(owner: string, id: string): Promise<{ id: string; object: 'file'; deleted: true }> {
    const [verdict, batch, status] = await this.conn.run<string[]>(DELETE_FILE, [
      id,
      owner,
      String(DELETED_FILE_CURSOR_TTL_MS),
    ]);
    if (verdict === 'missing') throw new JobError(JobErrors.fileNotFound, `no file ${id}`, 'file_id');
    if (verdict === 'busy') {
      throw new JobError(
        JobErrors.fileInUse,
        `file ${id} is the input of batch ${batch}, which is ${status}`,
        'file_id',
      );
    }
    return { id, object: 'file', deleted: true };
  }

  /** The fields of `owner`'s file `id`; `JobError` 404 when unknown or another owner's. */
  async fields(owner: string, id: string): Promise<FileFields> {
    const f = readFile(
      await this.conn.send<(string | null)[]>(['HMGET', this.conn.keys.file(id), ...FILE_FIELDS]),
    );
    if (f === null || f.owner !== owner)
      throw new JobError(JobErrors.fileNotFound, `no file ${id}`, 'file_id');
    return f;
  }

  /** The stored text of an upload ('' when it went meanwhile). */
  async uploadText(id: string): Promise<string> {
    return (await this.conn.send<string | null>(['HGET', this.conn.keys.file(id), 'content'])) ?? '';
  }

  /** The file object; an output or error file's size is measured on first read, then kept. */
  private async toFile(f: FileFields): Promise<FileObject> {
    let bytes = f.bytes === null ? null : Number(f.bytes);
    if (bytes === null) {
      bytes = 0;
      for (const line of await this.render(f.batch_id ?? '', f.kind === 'output' ? 'output' : 'error'))
        bytes += Buffer.byteLength(line) + 1;
      // A batch gets its files only once every item has its final result: the size never changes.
      await this.conn.run(FILE_BYTES, [f.id, String(bytes)]);
    }
    return {
      id: f.id,
      object: 'file',
      bytes,
      created_at: Number(f.created_at),
      filename: f.filename,
      purpose: f.purpose,
      status: 'processed',
    };
  }

  /** The lines of a batch's output or error file, in input order. */
  private async render(batchId: string, kind: 'output' | 'error'): Promise<string[]> {
    const keys = this.conn.keys;
    const [firstItem, total] = await this.conn.send<(string | null)[]>([
      'HMGET',
      keys.batch(batchId),
      'first_item',
      'total',
    ]);
    if (firstItem === null || firstItem === undefined) return [];
    return renderResultLines(
      (args) => this.conn.send(args),
      {
        resultsKey: keys.results(batchId),
        customIdsKey: keys.customIds(batchId),
        firstItem: Number(firstItem),
        total: Number(total),
      },
      kind,
      this.chunk,
    );
  }
}
