/**
 * "Did you mean" for config keys and names: picks the candidate closest to a misspelt word by edit
 * distance. Pure string logic, used only while reporting errors.
 */

/** Levenshtein distance with adjacent transpositions counted as one edit (`pools` vs `pols`). */
function editDistance(a: string, b: string): number {
  const rows = a.length + 1;
  const cols = b.length + 1;
  const d: number[] = new Array<number>(rows * cols).fill(0);
  const at = (i: number, j: number): number => d[i * cols + j] ?? 0;
  for (let i = 0; i < rows; i++) d[i * cols] = i;
  for (let j = 0; j < cols; j++) d[j] = j;
  for (let i = 1; i < rows; i++) {
    for (let j = 1; j < cols; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let best = Math.min(at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) {
        best = Math.min(best, at(i - 2, j - 2) + 1);
      }
      d[i * cols + j] = best;
    }
  }
  return at(a.length, b.length);
}

/**
 * Returns the candidate that `word` most plausibly misspells, or undefined when none is close
 * enough: at most a third of the word's letters may differ (at least one edit is always allowed),
 * compared case-insensitively; failing that, a candidate the word is a prefix of (`connections` →
 * `connections_per_node`, for words of four letters or more). Ties go to the earlier candidate.
 */
export function suggestClosest(word: string, candidates: readonly string[]): string | undefined {
  const lower = word.toLowerCase();
  const budget = Math.max(1, Math.floor(lower.length / 3));
  let best: string | undefined;
  let bestDistance = Infinity;
  for (const candidate of candidates) {
    const distance = editDistance(lower, candidate.toLowerCase());
    if (distance <= budget && distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  if (best === undefined && lower.length >= 4) {
    best = candidates.find((candidate) => candidate.toLowerCase().startsWith(lower));
  }
  return best;
}
