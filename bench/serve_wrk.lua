-- wrk script of bench/serve_bench.py: POSTs the JSON bodies of BODIES (a file, one body a
-- line), each connection's thread taking them in turn, and prints one JSON line at the end:
-- requests, seconds, errors (socket errors, timeouts and statuses other than 2xx), and the
-- 50th and 99th latency percentiles (microseconds; wrk measures them per request).
local bodies = {}
for line in io.lines(os.getenv("BODIES")) do bodies[#bodies + 1] = line end
local path = os.getenv("URL_PATH") or "/v1/embeddings"
local n = 0

function init(args)
    -- threads start at different bodies
    n = math.random(#bodies)
end

function request()
    n = n % #bodies + 1
    return wrk.format("POST", path, {["Content-Type"] = "application/json"}, bodies[n])
end

function done(summary, latency, requests)
    local e = summary.errors
    io.write(string.format('{"requests":%d,"seconds":%.3f,"errors":%d,"non2xx":%d,"p50_us":%.1f,"p99_us":%.1f,"mean_us":%.1f}\n',
        summary.requests, summary.duration / 1e6, e.connect + e.read + e.write + e.timeout, e.status,
        latency:percentile(50), latency:percentile(99), latency.mean))
end
