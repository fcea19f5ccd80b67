-- wrk script of the proxy benchmark (loadtest/bench/): POSTs the chat body read from BODY_FILE
-- with the benchmark's API key (API_KEY), and prints one summary line when the run is done:
--   WRKJSON {"requests":N,"duration_us":N,"bytes":N,"errors":{...},"latency_us":{...}}
-- loadtest/bench/wrk-output.ts parses that line.
local f = assert(io.open(assert(os.getenv("BODY_FILE"), "BODY_FILE is not set"), "rb"))
local body = f:read("*a")
f:close()

wrk.method = "POST"
wrk.body = body
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. (os.getenv("API_KEY") or "none")

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"p50":%.1f,"p90":%.1f,"p99":%.1f,"p999":%.1f,"max":%.1f,"mean":%.1f}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.max, latency.mean))
end
