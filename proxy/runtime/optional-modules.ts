/**
 * Packages that only some configurations use, loaded the first time one of them is needed rather
 * when the process starts: the `redis` client (rate limits, plugin store or batch jobs on Redis),
 * `better-sqlite3` (the batch API's job file), `pino` (the access log) and `undici` (`https:` nodes,
 * pools with `upstream_client: undici`, and `httpFetch` below; plain `http:` nodes use Sluice's own
 * client). Imported at startup they cost about 45 MiB of resident memory (`redis` about 20 MiB,
 * `undici` about 8 MiB in a Sluice at rest) in every process, used or not (`npm run bench:idle`
 * prints the baseline). All four are CommonJS packages, so they load synchronously, while a config
 * is being applied, never on the request path.
 */
import { createRequire } from 'node:module';
import type * as Redis from 'redis';
import type BetterSqlite3 from 'better-sqlite3';
import type * as Pino from 'pino';
import type * as Undici from 'undici';

const load = createRequire(import.meta.url);

let redis: typeof Redis | null = null;
let sqlite: typeof BetterSqlite3 | null = null;
let pino: typeof Pino | null = null;
let undici: typeof Undici | null = null;

/** The `redis` package. */
export function redisPackage(): typeof Redis {
  return (redis ??= load('redis') as typeof Redis);
}

/** The `better-sqlite3` package (its `Database` class). */
export function sqlitePackage(): typeof BetterSqlite3 {
  return (sqlite ??= load('better-sqlite3') as typeof BetterSqlite3);
}

/** The `pino` package. */
export function pinoPackage(): typeof Pino {
  return (pino ??= load('pino') as typeof Pino);
}

/** The `undici` package. */
export function undiciPackage(): typeof Undici {
  return (undici ??= load('undici') as typeof Undici);
}

/**
 * `fetch` from the undici package, for Sluice's own outgoing calls off the request path (the
 * `stats` and `capacity` commands' admin API reads, the OTLP exporter). Node 20's built-in `fetch`
 * never settles when a server drops the connection before answering (a command would then wait
 * out its timeout, or exit 13 with nothing else keeping the process alive); the package's rejects
 * with the socket error at once, on every Node version.
 */
export function httpFetch(
  input: string | URL,
  init?: Parameters<typeof Undici.fetch>[1],
): ReturnType<typeof Undici.fetch> {
  return undiciPackage().fetch(input, init);
}
