/** Pre-built `"<code> <reason>"` status lines, so writing a status allocates nothing. */
import { STATUS_CODES } from 'node:http';

const LINES: string[] = [];
for (let code = 100; code < 600; code++) LINES[code] = `${code} ${STATUS_CODES[code] ?? 'Unknown'}`;

/** The status line for `code` (any integer from 100 to 599). */
export function statusLine(code: number): string {
  return LINES[code] ?? `${code} Unknown`;
}
