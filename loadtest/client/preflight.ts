/**
 * Checks, before any traffic, that something accepts TCP connections at the target, so that a
 * wrong port ends the run at once with a plain message instead of a flood of connection errors.
 */

import { connect } from 'node:net';
import { LoadtestError, LoadtestErrorCode } from '../loadtest-error.js';

/**
 * Resolves when a TCP connection to `origin` (an `http://host:port` URL) opens within `timeoutMs`;
 * rejects with `SLUICE_LOADTEST_TARGET_REFUSED` when it is refused, `..._UNREACHABLE` otherwise.
 */
export function checkReachable(origin: string, timeoutMs = 3000): Promise<void> {
  const url = new URL(origin);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: url.hostname, port: Number(url.port) });
    const fail = (err: Error & { code?: string }): void => {
      socket.destroy();
      if (err.code === 'ECONNREFUSED') {
        reject(
          new LoadtestError(
            LoadtestErrorCode.targetRefused,
            `${origin} refused the connection (ECONNREFUSED): nothing listens there; start the target or fix the scenario's target`,
          ),
        );
      } else {
        reject(
          new LoadtestError(
            LoadtestErrorCode.targetUnreachable,
            `${origin} is unreachable: ${err.code ?? err.message}`,
          ),
        );
      }
    };
    socket.setTimeout(timeoutMs, () =>
      fail(Object.assign(new Error(`no answer within ${timeoutMs} ms`), { code: 'ETIMEDOUT' })),
    );
    socket.once('error', fail);
    socket.once('connect', () => {
      socket.destroy();
      resolve();
    });
  });
}
