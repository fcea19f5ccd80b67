/**
 * Reads the `multipart/form-data` body of `POST /v1/files` (what OpenAI SDKs send: a `file` part
 * and a `purpose` field) with the platform's own form-data parser. It validates the form only;
 * the JSONL inside is the job store's to check.
 */
import type { CreateFileParams } from '../jobs/job-store.js';
import { JobError, JobErrors } from '../jobs/job-errors.js';

/**
 * Parses an upload into the store's `createFile` arguments. Throws `JobError` (400) for a body
 * that is not multipart form data, a missing `file` part or `purpose` field.
 */
export async function readUpload(
  contentType: string | undefined,
  body: Buffer | null,
): Promise<CreateFileParams> {
  if (contentType === undefined || !contentType.toLowerCase().startsWith('multipart/form-data')) {
    throw new JobError(
      JobErrors.invalidRequest,
      'upload a file as multipart/form-data with a "file" part and a "purpose" field',
      'file',
    );
  }
  let form: FormData;
  try {
    form = await new Response(body ?? Buffer.alloc(0), {
      headers: { 'content-type': contentType },
    }).formData();
  } catch (err) {
    throw new JobError(
      JobErrors.invalidRequest,
      `the multipart body could not be read: ${err instanceof Error ? err.message : String(err)}`,
      'file',
    );
  }
  const purpose = form.get('purpose');
  if (typeof purpose !== 'string' || purpose === '') {
    throw new JobError(JobErrors.invalidRequest, 'the "purpose" field is missing; use "batch"', 'purpose');
  }
  const file = form.get('file');
  if (file === null || typeof file === 'string') {
    throw new JobError(JobErrors.invalidRequest, 'the "file" part is missing or is not a file', 'file');
  }
  return { filename: file.name || 'upload.jsonl', purpose, content: Buffer.from(await file.arrayBuffer()) };
}
