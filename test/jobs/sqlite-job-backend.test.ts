import { createSqliteJobBackend } from '../../proxy/jobs/sqlite-job-backend.js';
import { CONFORMANCE_COMPLETION_WINDOWS, describeJobBackend } from './backend-conformance.js';
import { tempDir } from './job-test-kit.js';

describeJobBackend('sqlite', async () => {
  const env = tempDir();
  const backend = createSqliteJobBackend(env.path, { completionWindows: CONFORMANCE_COMPLETION_WINDOWS });
  const cleanup = async (): Promise<void> => {
    await backend.close();
    env.cleanup();
  };
  return { backend, cleanup };
});
