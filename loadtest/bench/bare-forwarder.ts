/**
 * The baseline the proxy-overhead benchmark compares Sluice against: the least a uWS + undici
 * forwarder can do (buffer the body, dispatch, stream the answer back) with no routing, checks or
 * metrics. Run as its own process: `node bare-forwarder.js LISTEN_PORT UPSTREAM_URL`.
 */
import { App, us_socket_local_port } from 'uWebSockets.js';
import { Pool } from 'undici';

const [portArg, upstream] = process.argv.slice(2);
if (portArg === undefined || upstream === undefined) {
  process.stderr.write('usage: bare-forwarder PORT UPSTREAM_URL\n');
  process.exit(2);
}
const pool = new Pool(upstream, { connections: 128 });

App()
  .any('/*', (res, req) => {
    const method = req.getCaseSensitiveMethod();
    const url = req.getUrl();
    const headers: string[] = [];
    req.forEach((k, v) => {
      if (k !== 'host' && k !== 'connection' && k !== 'content-length') headers.push(k, v);
    });
    let aborted = false;
    res.onAborted(() => (aborted = true));
    const chunks: Buffer[] = [];
    res.onData((chunk, last) => {
      chunks.push(Buffer.from(new Uint8Array(chunk)));
      if (!last) return;
      pool.dispatch(
        { method, path: url, headers, body: Buffer.concat(chunks) },
        {
          onRequestStart() {},
          onResponseStart(_c, status, h) {
            if (aborted) return;
            res.cork(() => {
              res.writeStatus(String(status));
              const ct = h['content-type'];
              if (typeof ct === 'string') res.writeHeader('content-type', ct);
            });
          },
          onResponseData(_c, data) {
            if (!aborted) res.cork(() => res.write(data));
          },
          onResponseEnd() {
            if (!aborted) res.cork(() => res.end());
          },
          onResponseError() {
            if (!aborted) res.cork(() => res.writeStatus('502 Bad Gateway').end());
          },
        },
      );
    });
  })
  .listen('127.0.0.1', Number(portArg), (s) => {
    if (!s) {
      process.stderr.write('bare-forwarder: cannot listen\n');
      process.exit(1);
    }
    process.stdout.write(`listening ${us_socket_local_port(s)}\n`);
  });
