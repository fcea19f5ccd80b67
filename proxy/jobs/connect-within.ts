/**
 * A first connection attempt bounded in time, shared by the Redis-backed job stores. It imports
 * no client library, so the embedded default never loads one.
 */

/** Resolves true when `connect` succeeds within `ms`, false when it fails or takes longer. */
export async function connectWithin(connect: () => Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const connected = await Promise.race([
    connect().then(
      () => true,
      () => false,
    ),
    new Promise<false>((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
    }),
  ]);
  clearTimeout(timer);
  return connected;
}
