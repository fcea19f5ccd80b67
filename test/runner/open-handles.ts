/**
 * Preloaded into every test process by the runner (`--import`). On SIGUSR2 (the file outlived its
 * time limit) it prints one `[open handles] ...` line naming what keeps the process alive, then
 * exits 124. It changes nothing else about the test process.
 */

/** One line describing a handle the event loop still waits on. */
function describeHandle(h: unknown): string {
  if (typeof h !== 'object' || h === null) return String(h);
  const name = (h as { constructor?: { name?: string } }).constructor?.name ?? 'handle';
  const o = h as Record<string, unknown>;
  try {
    if (typeof o['address'] === 'function' && name === 'Server') {
      const a = (o['address'] as () => unknown).call(h) as { address?: string; port?: number } | null;
      if (a !== null && typeof a === 'object') return `net.Server listening on ${a.address}:${a.port}`;
    }
    if (name === 'Socket' && typeof o['remotePort'] === 'number') {
      return `Socket ${String(o['localAddress'])}:${String(o['localPort'])} -> ${String(o['remoteAddress'])}:${String(o['remotePort'])}`;
    }
    if (name === 'ChildProcess') return `child process ${String(o['spawnfile'])} (pid ${String(o['pid'])})`;
  } catch {
    // Describing is best effort; the type name below still says what it is.
  }
  return name;
}

process.on('SIGUSR2', () => {
  const handles = (process as unknown as { _getActiveHandles?: () => unknown[] })._getActiveHandles?.() ?? [];
  const described = handles
    .filter((h) => h !== process.stdout && h !== process.stderr && h !== process.stdin)
    .map(describeHandle);
  const resources = process.getActiveResourcesInfo().filter((r) => r !== 'TTYWrap' && r !== 'PipeWrap');
  const counts = new Map<string, number>();
  for (const r of resources) counts.set(r, (counts.get(r) ?? 0) + 1);
  const summary = [...counts].map(([k, n]) => (n > 1 ? `${k} x${n}` : k)).join(', ');
  process.stderr.write(`\n[open handles] ${described.join('; ') || 'none'} | resources: ${summary}\n`);
  process.exit(124);
});
