/**
 * A latency-by-percentile plot as a standalone SVG, drawn the way HdrHistogram's plotter draws
 * it: the x axis is the percentile on a log scale of 1/(1 − p) (0%, 90%, 99%, 99.9%, ...), so the
 * tail gets as much room as the body; the y axis is latency in milliseconds. Writes text only.
 */

import type { Histogram } from 'hdr-histogram-js';

/** One line of the plot. */
export interface PlotSeries {
  /** Legend label; also the `data-series` attribute of its polyline. */
  name: string;
  /** Values in µs. */
  histogram: Histogram;
}

const WIDTH = 880; // px
const HEIGHT = 520; // px
const LEFT = 72; // px
const RIGHT = 24; // px
const TOP = 44; // px
const BOTTOM = 96; // px, axis labels and legend
const COLORS = ['#1f77b4', '#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf'];
/** Points per halving of the remaining distance to 100%. */
const TICKS_PER_HALF = 5;

/** Escapes text for XML content and attribute values. */
export function escapeXml(text: string): string {
  return text.replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&apos;' })[c] ?? c,
  );
}

/** The smallest of 1, 2, 2.5, 5 × 10^k that is >= v (v > 0). */
export function niceCeil(v: number): number {
  if (!(v > 0)) return 1;
  const base = 10 ** Math.floor(Math.log10(v));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * base >= v) return m * base;
  return 10 * base;
}

/** Points (x = log10(1/(1-p)), y = ms) of a histogram, up to the resolution its count allows, ending at the max. */
export function percentilePoints(h: Histogram, maxDecades: number): [number, number][] {
  const points: [number, number][] = [];
  if (h.totalCount === 0) return points;
  const last = Math.min(maxDecades, Math.log10(h.totalCount));
  for (let k = 0; ; k++) {
    const x = (k / TICKS_PER_HALF) * Math.log10(2);
    if (x >= last) break;
    const p = 1 - 0.5 ** (k / TICKS_PER_HALF);
    points.push([x, h.getValueAtPercentile(p * 100) / 1000]);
  }
  points.push([last, h.maxValue / 1000]);
  return points;
}

/** Label of the decade tick d: 0%, 90%, 99%, 99.9%, ... */
function decadeLabel(d: number): string {
  if (d === 0) return '0%';
  return `${(100 - 100 / 10 ** d).toFixed(Math.max(0, d - 2))}%`;
}

/** The SVG document for `series` under `title`. */
export function renderSvgPlot(title: string, series: readonly PlotSeries[]): string {
  const maxCount = Math.max(10, ...series.map((s) => s.histogram.totalCount));
  const decades = Math.max(1, Math.min(7, Math.ceil(Math.log10(maxCount))));
  const lines = series.map((s) => percentilePoints(s.histogram, decades));
  const yMax = niceCeil(Math.max(0, ...lines.flat().map(([, y]) => y)));
  const plotW = WIDTH - LEFT - RIGHT;
  const plotH = HEIGHT - TOP - BOTTOM;
  const px = (x: number): number => LEFT + (x / decades) * plotW;
  const py = (y: number): number => TOP + plotH - (y / yMax) * plotH;
  const f = (n: number): string => n.toFixed(1);
  const out: string[] = [
    '<?xml version="1.0" encoding="UTF-8"?>',
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${HEIGHT}" viewBox="0 0 ${WIDTH} ${HEIGHT}" font-family="sans-serif" font-size="12">`,
    `<title>${escapeXml(title)}</title>`,
    `<rect x="0" y="0" width="${WIDTH}" height="${HEIGHT}" fill="#ffffff"/>`,
    `<text x="${WIDTH / 2}" y="24" text-anchor="middle" font-size="15">${escapeXml(title)}</text>`,
    '<g class="grid" stroke="#dddddd" stroke-width="1">',
  ];
  const labels: string[] = [];
  for (let d = 0; d <= decades; d++) {
    out.push(`<line x1="${f(px(d))}" y1="${TOP}" x2="${f(px(d))}" y2="${TOP + plotH}"/>`);
    labels.push(
      `<text x="${f(px(d))}" y="${TOP + plotH + 18}" text-anchor="middle">${decadeLabel(d)}</text>`,
    );
  }
  for (let i = 0; i <= 5; i++) {
    const y = (yMax * i) / 5;
    out.push(`<line x1="${LEFT}" y1="${f(py(y))}" x2="${LEFT + plotW}" y2="${f(py(y))}"/>`);
    labels.push(
      `<text x="${LEFT - 8}" y="${f(py(y) + 4)}" text-anchor="end">${escapeXml(String(Number(y.toPrecision(4))))}</text>`,
    );
  }
  out.push('</g>', '<g class="labels" fill="#333333">', ...labels);
  out.push(`<text x="${LEFT + plotW / 2}" y="${TOP + plotH + 40}" text-anchor="middle">percentile</text>`);
  out.push(
    `<text x="18" y="${TOP + plotH / 2}" text-anchor="middle" transform="rotate(-90 18 ${TOP + plotH / 2})">latency (ms)</text>`,
    '</g>',
  );
  out.push(`<rect x="${LEFT}" y="${TOP}" width="${plotW}" height="${plotH}" fill="none" stroke="#888888"/>`);
  series.forEach((s, i) => {
    const color = COLORS[i % COLORS.length] as string;
    const points = (lines[i] ?? []).map(([x, y]) => `${f(px(x))},${f(py(y))}`).join(' ');
    out.push(
      `<polyline class="series" data-series="${escapeXml(s.name)}" fill="none" stroke="${color}" stroke-width="2" points="${points}"/>`,
    );
    const lx = LEFT + 10 + (i % 4) * 200;
    const ly = HEIGHT - 22 + Math.floor(i / 4) * 16 - (series.length > 4 ? 16 : 0);
    out.push(
      `<line x1="${lx}" y1="${ly - 4}" x2="${lx + 24}" y2="${ly - 4}" stroke="${color}" stroke-width="3"/>`,
    );
    out.push(`<text x="${lx + 30}" y="${ly}">${escapeXml(`${s.name} (n=${s.histogram.totalCount})`)}</text>`);
  });
  out.push('</svg>', '');
  return out.join('\n');
}
