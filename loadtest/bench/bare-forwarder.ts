/**
 * The baseline the proxy-overhead benchmark compares Sluice against: the least a uWS + undici
 * forwarder can do (buffer the body, dispatch, stream the answer back) with no routing, checks or
 * metrics. Runs as a load-tester child process (`child-entry.js bare-forwarder PORT UPSTREAM_URL`)
 * until SIGTERM or SIGINT.
 */
import { App, us_listen_socket_close, us_socket_local_port, type us_listen_socket } from 'uWebSockets.js';
import { Pool } from 'undici';

/**
 * Listens on 127.0.0.1:PORT (0 = a free port), prints `bare forwarder listening on URL`, forwards
 * everything to UPSTREAM_URL and resolves 0 after a stop signal; 2 for bad arguments, 1 when it
 * cannot listen.
 */
export async function runBareForwarder(argv: readonly string[]): Promise<number> {
  const [portArg, upstream] = argv;
  if (portArg === undefined || upstream === undefined) {
    process.stderr.write('usage: bare-forwarder PORT UPSTREAM_URL\n');
    return 2;
  }
  const pool = new Pool(upstream, { connections: 128 });
  const app = App().any('/*', (res, req) => {
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
  });
  const socket = await new Promise<us_listen_socket | false>((resolve) =>
    app.listen('127.0.0.1', Number(portArg), resolve),
  );
  if (socket === false) {
    process.stderr.write('bare-forwarder: cannot listen\n');
    await pool.close();
    return 1;
  }
  process.stdout.write(`bare forwarder listening on http://127.0.0.1:${us_socket_local_port(socket)}\n`);
  await new Promise<void>((resolve) => {
    process.once('SIGTERM', resolve);
    process.once('SIGINT', resolve);
  });
  us_listen_socket_close(socket);
  await pool.destroy();
  return 0;
}
