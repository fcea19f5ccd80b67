/**
 * Plain-text tables and number formats for terminal reports: columns padded to their widest cell,
 * the first column left-aligned and the rest right-aligned. Formatting only.
 */

/** Renders rows (the first is the header) as aligned lines, two spaces between columns. */
export function textTable(rows: readonly (readonly string[])[], indent = ''): string[] {
  const widths: number[] = [];
  for (const row of rows) row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, cell.length)));
  return rows.map(
    (row) =>
      indent +
      row
        .map((cell, i) => (i === 0 ? cell.padEnd(widths[i] ?? 0) : cell.padStart(widths[i] ?? 0)))
        .join('  ')
        .trimEnd(),
  );
}

/** Milliseconds with precision that suits the size: `0.42`, `12.3`, `2380`; `-` for null. */
export function fmtMs(ms: number | null): string {
  if (ms === null || !Number.isFinite(ms)) return '-';
  if (ms < 10) return ms.toFixed(2);
  if (ms < 1000) return ms.toFixed(1);
  return ms.toFixed(0);
}

/** A fraction as a percentage with one decimal, `-` for null. */
export function fmtPct(fraction: number | null): string {
  return fraction === null || !Number.isFinite(fraction) ? '-' : `${(fraction * 100).toFixed(1)}%`;
}

/** An integer with thousands separators. */
export function fmtInt(n: number): string {
  return Math.round(n).toLocaleString('en-US');
}

/** A rate or other real number with one decimal (three significant digits below 1), `-` for null. */
export function fmtNum(n: number | null): string {
  if (n === null || !Number.isFinite(n)) return '-';
  return Math.abs(n) < 1 && n !== 0
    ? n.toPrecision(3)
    : n.toLocaleString('en-US', { maximumFractionDigits: 1 });
}
