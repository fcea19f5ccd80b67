/**
 * Test helper: a loopback port that refuses connections for the whole run, for tests of a dead
 * node or an unreachable target. A port freed just before (`freePort`) can be taken by another
 * test's server in the meantime (`listen(0)` hands freed ports out again); the kernel never hands
 * out a port below 1024 that way and no test binds one, so a privileged port found closed stays
 * closed.
 */
import { connect } from 'node:net';

/** Well-known ports no test machine serves on loopback (echo, discard, daytime, chargen, ...). */
const CANDIDATES = [7, 9, 13, 19, 37, 79, 101, 113, 119, 179] as const;

let found: Promise<number[]> | null = null;

/** `count` distinct ports on 127.0.0.1 whose connection attempts are refused (ECONNREFUSED). */
export async function refusedPorts(count: number): Promise<number[]> {
  found ??= closedCandidates();
  const ports = await found;
  if (ports.length < count) {
    throw new Error(
      `only ${ports.length} of the ports ${CANDIDATES.join(', ')} refuse connections on 127.0.0.1`,
    );
  }
  return ports.slice(0, count);
}

/** One such port. */
export async function refusedPort(): Promise<number> {
  return (await refusedPorts(1))[0]!;
}

async function closedCandidates(): Promise<number[]> {
  const out: number[] = [];
  for (const port of CANDIDATES) if (await refuses(port)) out.push(port);
  return out;
}

function refuses(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port });
    // Loopback refuses at once; a port that neither accepts nor refuses is no use either.
    socket.setTimeout(2000, () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('connect', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', (e: NodeJS.ErrnoException) => resolve(e.code === 'ECONNREFUSED'));
  });
}
