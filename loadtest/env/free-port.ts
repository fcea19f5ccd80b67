/**
 * Free TCP ports on 127.0.0.1 for processes whose ports must be known before they start (a Sluice
 * child's listener and admin API). The port is free when returned; another process could take it
 * before it is bound again, which the caller reports as a start failure.
 */

import { createServer } from 'node:net';

/** A port that was free on 127.0.0.1 a moment ago. */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address !== null ? address.port : 0));
    });
  });
}
