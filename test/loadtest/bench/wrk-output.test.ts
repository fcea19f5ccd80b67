/** Reading wrk's summary line: the figures, the last line winning, and output that has none. */

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { WrkOutputError, errorCount, parseWrkOutput } from '../../../loadtest/bench/wrk-output.js';

const LINE =
  'WRKJSON {"requests":123456,"duration_us":10002000,"bytes":98765432,' +
  '"errors":{"connect":0,"read":2,"write":0,"status":3,"timeout":1},' +
  '"latency_us":{"p50":1850.0,"p90":2600.5,"p99":13310.0,"p999":29200.0,"max":41000.0,"mean":2000.0}}';

const WRK_OUTPUT = [
  'Running 10s test @ http://127.0.0.1:40233/v1/chat/completions',
  '  1 threads and 50 connections',
  '  Thread Stats   Avg      Stdev     Max   +/- Stdev',
  '    Latency     2.00ms    1.10ms  41.00ms   90.00%',
  '  123456 requests in 10.00s, 94.19MB read',
  'Requests/sec:  12343.13',
  LINE,
  '',
].join('\n');

describe('wrk output', () => {
  it('reads requests, duration, bytes, errors and latency percentiles in ms from the WRKJSON line', () => {
    const s = parseWrkOutput(WRK_OUTPUT);
    assert.equal(s.requests, 123456);
    assert.equal(s.durationS, 10.002);
    assert.equal(s.bytes, 98765432);
    assert.deepEqual(s.errors, { connect: 0, read: 2, write: 0, status: 3, timeout: 1 });
    assert.equal(errorCount(s), 6);
    assert.equal(s.p50Ms, 1.85);
    assert.equal(s.p90Ms, 2.6005);
    assert.equal(s.p99Ms, 13.31);
    assert.equal(s.p999Ms, 29.2);
    assert.equal(s.maxMs, 41);
  });

  it('takes the last summary line when there are several', () => {
    const later = LINE.replace('"requests":123456', '"requests":7');
    assert.equal(parseWrkOutput(`${LINE}\n${later}\n`).requests, 7);
  });

  it('refuses output without a summary line, quoting its end', () => {
    assert.throws(
      () => parseWrkOutput('unable to connect to 127.0.0.1:1 Connection refused\n'),
      (err: unknown) => err instanceof WrkOutputError && /Connection refused/.test(err.message),
    );
  });

  it('refuses a malformed or incomplete summary', () => {
    assert.throws(() => parseWrkOutput('WRKJSON {"requests":1,'), WrkOutputError);
    assert.throws(() => parseWrkOutput('WRKJSON {"requests":1,"duration_us":0,"bytes":0}'), WrkOutputError);
    assert.throws(() => parseWrkOutput(LINE.replace('"p99":13310.0', '"p99":-nan')), WrkOutputError);
    assert.throws(() => parseWrkOutput(LINE.replace('"read":2,', '')), /errors\.read/);
  });
});
