-- wrk script for the proxy-overhead benchmark (bench/src/overhead.ts): POST /v1/chat/completions.
--
-- Configured by environment variables (read at load, so every wrk Lua state sees them, including the
-- main one, where wrk decides whether delay() exists):
--   BENCH_MODEL        model name                              (default bench-model)
--   BENCH_PROMPT_BYTES bytes of the user message content       (default 100)
--   BENCH_MAX_TOKENS   max_tokens                              (default 16)
--   BENCH_STREAM       "1" for SSE (stream: true), else JSON   (default 0)
--   BENCH_DELAY_MS     mean pause of one connection between a response and its next request, ms;
--                      0 or unset = closed loop, no delay() at all (as fast as the server answers)
--   BENCH_RUN_ID       tag that keeps prompts of different runs apart (default 0)
--   BENCH_API_KEY      sent as Authorization: Bearer (a router with auth: api-keys); unset = none
--
-- Every request gets a different prompt: "r<run>t<thread>n<counter> " followed by a fixed filler,
-- padded to exactly BENCH_PROMPT_BYTES. The unique part comes first, so no two prompts share a
-- prefix block: the router's prefix index hashes and inserts every block of every request.
--
-- The pause is drawn uniformly from [0.5, 1.5] × BENCH_DELAY_MS, so connections do not fire in
-- lockstep; the mean rate is connections / (BENCH_DELAY_MS + latency).
--
-- done() prints one line: "WRK_JSON {...}" with wrk's summary and latency statistics (µs).

local model = os.getenv("BENCH_MODEL") or "bench-model"
local prompt_bytes = tonumber(os.getenv("BENCH_PROMPT_BYTES") or "100")
local max_tokens = tonumber(os.getenv("BENCH_MAX_TOKENS") or "16")
local stream = os.getenv("BENCH_STREAM") == "1"
local delay_ms = tonumber(os.getenv("BENCH_DELAY_MS") or "0")
local run_id = os.getenv("BENCH_RUN_ID") or "0"

local words = { "route", "the", "prefix", "cache", "block", "token", "queue", "batch", "decode", "prefill", "engine", "fleet" }
local parts = {}
local length = 0
local i = 0
while length < prompt_bytes do
  i = i + 1
  local word = words[(i * 7) % #words + 1]
  parts[#parts + 1] = word
  length = length + #word + 1
end
local filler = table.concat(parts, " ")

local head = '{"model":"' .. model .. '","messages":[{"role":"user","content":"'
local tail = '"}],"max_tokens":' .. max_tokens .. ',"stream":' .. (stream and "true" or "false") .. "}"

wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
if stream then
  wrk.headers["Accept"] = "text/event-stream"
end
local api_key = os.getenv("BENCH_API_KEY")
if api_key and api_key ~= "" then
  wrk.headers["Authorization"] = "Bearer " .. api_key
end

local thread_counter = 0
function setup(thread)
  thread_counter = thread_counter + 1
  thread:set("thread_id", thread_counter)
end

thread_id = 0
local counter = 0

function init(_args)
  math.randomseed(os.time() * 1000 + thread_id)
end

function request()
  counter = counter + 1
  local tag = string.format("r%st%dn%09d ", run_id, thread_id, counter)
  local content = tag .. filler
  if #content > prompt_bytes then
    content = string.sub(content, 1, prompt_bytes)
  end
  return wrk.format(nil, nil, nil, head .. content .. tail)
end

if delay_ms > 0 then
  function delay()
    return math.floor(delay_ms * (0.5 + math.random()) + 0.5)
  end
end

function done(summary, latency, _requests)
  local e = summary.errors
  io.write(string.format(
    'WRK_JSON {"durationUs":%d,"requests":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latencyUs":{"min":%d,"mean":%.1f,"stdev":%.1f,"max":%d,"p50":%d,"p90":%d,"p99":%d,"p999":%d}}\n',
    summary.duration, summary.requests, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.mean, latency.stdev, latency.max,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency:percentile(99.9)))
end
