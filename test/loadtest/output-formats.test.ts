/**
 * The files a run writes: the `.hgrm` percentile distribution in HdrHistogram's text format (in
 * milliseconds), and the SVG plot, which must be well-formed XML carrying one line per series.
 */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { encodeIntoCompressedBase64 } from 'hdr-histogram-js';
import { createLatencyHistogram, recordMs } from '../../loadtest/drive/latency-histogram.js';
import { decodeHistogram, hgrmText } from '../../loadtest/report/hgrm.js';
import { niceCeil, percentilePoints, renderSvgPlot } from '../../loadtest/report/svg-plot.js';
import { checkXml } from './xml-check.js';

function sample(n: number, scaleMs: number): ReturnType<typeof createLatencyHistogram> {
  const h = createLatencyHistogram();
  for (let i = 1; i <= n; i++) recordMs(h, (i / n) * scaleMs);
  return h;
}

describe('.hgrm output', () => {
  it('is the HdrHistogram percentile distribution in ms, with header, rows and summary footer', () => {
    const h = sample(1000, 1000);
    const lines = hgrmText(h).split('\n');
    assert.match(lines[0] ?? '', /^\s+Value\s+Percentile\s+TotalCount\s+1\/\(1-Percentile\)$/);
    assert.equal(lines[1], '');
    const rows = lines
      .slice(2)
      .filter((l) => /^\s+\d/.test(l))
      .map((l) => l.trim().split(/\s+/).map(Number));
    assert.ok(rows.length > 20);
    assert.deepEqual(rows[0]?.slice(1, 3), [0, 1]);
    const half = rows.find((r) => r[1] === 0.5);
    assert.ok(half !== undefined && Math.abs((half[0] ?? 0) - 500) <= 0.5, `p50 row ${String(half)}`);
    assert.deepEqual(rows.at(-1)?.slice(1, 3), [1, 1000]);
    for (let i = 1; i < rows.length; i++)
      assert.ok((rows[i]?.[0] ?? 0) >= (rows[i - 1]?.[0] ?? 0), 'values ascend');
    assert.ok(lines.some((l) => /^#\[Mean\s+=\s+500\.\d+, StdDeviation\s+=/.test(l)));
    assert.ok(lines.some((l) => /^#\[Max\s+=\s+1000\.000, Total count\s+=\s+1000\]$/.test(l)));
    assert.ok(lines.some((l) => l.startsWith('#[Buckets')));
  });

  it('survives the round trip through the base64 encoding kept in the result JSON', () => {
    // The encoding keeps counts per bucket, so the decoded maximum is its bucket's highest
    // equivalent value (within 0.1%); every row is the same.
    const h = sample(500, 80);
    const rows = (text: string): string[] => text.split('\n').filter((l) => !l.startsWith('#[Max'));
    assert.deepEqual(rows(hgrmText(decodeHistogram(encodeIntoCompressedBase64(h)))), rows(hgrmText(h)));
  });
});

describe('SVG plot', () => {
  it('is well-formed XML with one polyline per series, on a log percentile axis', () => {
    const svg = renderSvgPlot('A & B <test> "plot"', [
      { name: 'end to end', histogram: sample(10_000, 200) },
      { name: 'ttft <x>', histogram: sample(10_000, 50) },
    ]);
    const elements = checkXml(svg);
    assert.equal(elements[0]?.name, 'svg');
    assert.equal(elements[0]?.attrs['xmlns'], 'http://www.w3.org/2000/svg');
    assert.equal(elements.find((e) => e.name === 'title')?.text, 'A & B <test> "plot"');
    const lines = elements.filter((e) => e.name === 'polyline');
    assert.deepEqual(
      lines.map((l) => l.attrs['data-series']),
      ['end to end', 'ttft <x>'],
    );
    for (const line of lines) {
      const points = (line.attrs['points'] ?? '').split(' ').map((p) => p.split(',').map(Number));
      assert.ok(points.length > 20);
      for (const [x, y] of points) assert.ok(Number.isFinite(x) && Number.isFinite(y));
      for (let i = 1; i < points.length; i++) assert.ok((points[i]?.[0] ?? 0) >= (points[i - 1]?.[0] ?? 0));
    }
    const labels = elements.filter((e) => e.name === 'text').map((e) => e.text);
    for (const tick of ['0%', '90%', '99%', '99.9%', '99.99%'])
      assert.ok(labels.includes(tick), `tick ${tick}`);
  });

  it('ends each line at the maximum and spaces decades evenly', () => {
    const h = sample(1000, 100);
    const points = percentilePoints(h, 3);
    assert.deepEqual(points[0], [0, h.getValueAtPercentile(0) / 1000]);
    assert.deepEqual(points.at(-1), [3, 100]);
    assert.equal(niceCeil(0.7), 1);
    assert.equal(niceCeil(180), 200);
    assert.equal(niceCeil(2100), 2500);
  });

  it('draws an empty histogram as an empty line without breaking the document', () => {
    const svg = renderSvgPlot('empty', [{ name: 'e2e', histogram: createLatencyHistogram() }]);
    const line = checkXml(svg).find((e) => e.name === 'polyline');
    assert.equal(line?.attrs['points'], '');
  });
});
