/**
 * One Redis command of the stores (rate limits, batch jobs, idempotency keys), bounded by a timer
 * of its own: the client's `timeout` option covers only a command still waiting to be written, so a
 * written command to a frozen or slow Redis held its caller (and the HTTP request behind it) as
 * long as Redis did. It also hands a reply that comes after the timeout to the caller, to undo
 * what nobody waits for any more. It knows nothing about what the stores keep.
 */

/** The part of a `redis` client a bounded command needs; any client of the `redis` package fits. */
export interface CommandSender {
  sendCommand<T = unknown>(args: ReadonlyArray<string | Buffer>): Promise<T>;
}

/** The rejection of a command that got no reply within its timeout. Redis may still run it. */
export class RedisCommandTimeout extends Error {
  constructor(ms: number) {
    super(`redis did not answer within ${ms} ms`);
    this.name = 'RedisCommandTimeout';
  }
}

/**
 * Sends `args`; resolves with the reply, rejects with Redis's error, or with `RedisCommandTimeout`
 * once `timeoutMs` has passed. A command that timed out is not cancelled (Redis may run it later):
 * its reply, if one comes, goes to `onLate` (which must not throw), else it is dropped.
 */
export function sendWithin<T>(
  client: CommandSender,
  args: ReadonlyArray<string | Buffer>,
  timeoutMs: number,
  onLate?: (reply: T) => void,
): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const timer = setTimeout(() => {
      // The rejection waits for the check phase: after an event-loop stall the timer phase runs
      // before the poll phase, and a reply already sitting in the socket must win over the timer.
      setImmediate(() => {
        if (settled) return;
        settled = true;
        reject(new RedisCommandTimeout(timeoutMs));
      });
    }, timeoutMs);
    client.sendCommand<T>(args).then(
      (reply) => {
        if (settled) {
          onLate?.(reply);
          return;
        }
        settled = true;
        clearTimeout(timer);
        resolve(reply);
      },
      (err: unknown) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        reject(err instanceof Error ? err : new Error(String(err)));
      },
    );
  });
}
