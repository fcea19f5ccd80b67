/**
 * What benchmarks and the chaos run read of a process from `/proc` (Linux): its resident set size
 * and its open file descriptors.
 */
import { readdir, readFile } from 'node:fs/promises';

/** Resident set size (`VmRSS`) of `pid`, MiB. */
export async function rssMiB(pid: number | undefined): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024;
}

/** Open file descriptors of `pid`. */
export async function openFds(pid: number | undefined): Promise<number> {
  return (await readdir(`/proc/${pid}/fd`)).length;
}
