/**
 * Writes a run's files into the output directory: `<scenario>-<variant>.json` (the result),
 * `.hgrm` (end-to-end percentile distribution), `-ttft.hgrm` when streams were measured, and `.svg`
 * (the percentile plot); and `<scenario>-variants.svg` and `<scenario>-variants-ttft.svg` comparing
 * the variants' end-to-end latency and time to first token.
 */

import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { decodeHistogram, hgrmText } from './hgrm.js';
import type { LoadtestResult } from './result.js';
import { renderSvgPlot, type PlotSeries } from './svg-plot.js';

/** The file name stem of a result. */
export function resultStem(r: LoadtestResult): string {
  return `${r.scenario}-${r.variant}`;
}

/** Writes the result's files into `dir` (created if missing); resolves to their paths. */
export async function writeRunFiles(r: LoadtestResult, dir: string): Promise<string[]> {
  await mkdir(dir, { recursive: true });
  const stem = join(dir, resultStem(r));
  const e2e = decodeHistogram(r.histograms.e2e);
  const ttft = decodeHistogram(r.histograms.ttft);
  const files: [string, string][] = [
    [`${stem}.json`, `${JSON.stringify(r, null, 2)}\n`],
    [`${stem}.hgrm`, hgrmText(e2e)],
  ];
  const series: PlotSeries[] = [{ name: 'end to end', histogram: e2e }];
  if (ttft.totalCount > 0) {
    files.push([`${stem}-ttft.hgrm`, hgrmText(ttft)]);
    series.push({ name: 'time to first token', histogram: ttft });
  }
  files.push([`${stem}.svg`, renderSvgPlot(`${r.scenario} / ${r.variant}: latency by percentile`, series)]);
  for (const [file, text] of files) await writeFile(file, text);
  return files.map(([file]) => file);
}

/**
 * Writes `<scenario>-variants.svg` with each variant's end-to-end line and, when streams were
 * measured, `<scenario>-variants-ttft.svg` with each variant's time-to-first-token line (a plot of
 * its own: on the end-to-end scale the first tokens would be a flat line at the bottom). Resolves
 * to the paths written.
 */
export async function writeVariantsPlot(results: readonly LoadtestResult[], dir: string): Promise<string[]> {
  const name = results[0]?.scenario ?? 'scenario';
  const e2eFile = join(dir, `${name}-variants.svg`);
  const e2e = results.map((r) => ({ name: r.variant, histogram: decodeHistogram(r.histograms.e2e) }));
  await writeFile(e2eFile, renderSvgPlot(`${name}: end-to-end latency by variant`, e2e));
  const ttft = results.map((r) => ({ name: r.variant, histogram: decodeHistogram(r.histograms.ttft) }));
  if (ttft.every((s) => s.histogram.totalCount === 0)) return [e2eFile];
  const ttftFile = join(dir, `${name}-variants-ttft.svg`);
  await writeFile(ttftFile, renderSvgPlot(`${name}: time to first token by variant`, ttft));
  return [e2eFile, ttftFile];
}
