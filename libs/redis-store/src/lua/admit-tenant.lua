--[[
  admit-tenant: one request's admission against its tenant's and its key's limits, all or nothing
  (docs/adr/0006-tenants-keys-limits.md): every rate bucket is checked, then every concurrency cap, and
  only when all pass is anything taken, so a request refused by one limit costs none of the others.

  Rates are GCRA (generic cell rate algorithm): a bucket with limit L per period T stores one number,
  its theoretical arrival time (TAT, ms). A request of n units (1 for requests, its reserved tokens
  for tokens) moves it to max(TAT, now) + n · T/L, and is admitted while that is at most T ahead of
  now: L units in a burst, then one every T/L. Exact across router replicas, no refill timer.
  Concurrency is a lease per request with a deadline (as the routing leases, ADR 0002): expired
  leases are purged before counting, so a replica that died holding one leaks nothing.

  KEYS[1]  <ns>:{tenant:<tag>}:rates            HASH bucket field -> TAT ms
  KEYS[2]  <ns>:{tenant:<tag>}:leases:tenant    ZSET lease id -> deadline ms, the tenant's requests in flight
  KEYS[3]  <ns>:{tenant:<tag>}:leases:key:<id>  ZSET lease id -> deadline ms, the key's requests in flight
  ARGV[1]  '' in production: now is Redis's own TIME, so replicas whose clocks disagree share one
           timeline; a number (ms since the Unix epoch) only from tests that move time
           (TenantLimits `clock: 'caller'`)
  ARGV[2]  lease id (unique per request)
  ARGV[3]  lease TTL, ms (> 0)
  ARGV[4]  rate buckets, one JSON array of {f: field, n: units, p: period ms, l: limit per period}
  ARGV[5]  the tenant's concurrency cap (0 = none)
  ARGV[6]  the key's concurrency cap (0 = none)

  Returns {admitted 1/0, retry after ms (0 when admitted; -1 = never: one bucket's n exceeds its limit),
  index of the first refusing limit (1-based over the buckets, then B+1 tenant cap, B+2 key cap; 0 when
  admitted), then per bucket: remaining units, ms until the bucket is full again}. Numbers are
  integers (ms rounded up, remaining rounded down).
]]

local now = tonumber(ARGV[1])
if now == nil then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local leaseId = ARGV[2]
local leaseTtl = tonumber(ARGV[3])
local buckets = cjson.decode(ARGV[4])
local caps = { tonumber(ARGV[5]), tonumber(ARGV[6]) }
local ceil, floor, max = math.ceil, math.floor, math.max
-- T / L is rarely exact in binary: the last unit of a full burst may land a rounding error past the
-- period. Within this many ms it still counts as on time (TATs are ms since the epoch, ~1e12).
local EPSILON_MS = 1e-3

local admitted, retryAfter, refusedBy = 1, 0, 0
local tail = {}
for k, b in ipairs(buckets) do
  local interval = b.p / b.l
  local tat = max(tonumber(redis.call('HGET', KEYS[1], b.f)) or now, now)
  local newTat = tat + b.n * interval
  if b.n > b.l then
    if admitted == 1 then admitted, retryAfter, refusedBy = 0, -1, k end
  elseif newTat - now > b.p + EPSILON_MS then
    if admitted == 1 then refusedBy = k end
    admitted = 0
    if retryAfter >= 0 then retryAfter = max(retryAfter, ceil(newTat - now - b.p)) end
  end
  tail[#tail + 1] = { tat, newTat, interval, b.p }
end

for c = 1, 2 do
  if caps[c] > 0 then
    local key = KEYS[c + 1]
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
    if redis.call('ZCARD', key) >= caps[c] then
      if admitted == 1 then refusedBy = #buckets + c end
      admitted = 0
      -- The earliest deadline bounds the wait; a request usually ends long before its lease would.
      local first = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
      if retryAfter >= 0 then retryAfter = max(retryAfter, max(1, ceil(math.min(1000, tonumber(first[2]) - now)))) end
    end
  end
end

local result = { admitted, admitted == 1 and 0 or retryAfter, refusedBy }
for k, b in ipairs(buckets) do
  local tat, newTat, interval, period = unpack(tail[k])
  local after = admitted == 1 and newTat or tat
  result[#result + 1] = max(0, floor((period - (after - now)) / interval + EPSILON_MS / interval))
  result[#result + 1] = max(0, ceil(after - now))
  if admitted == 1 then redis.call('HSET', KEYS[1], b.f, string.format('%.17g', newTat)) end
end

-- The hash may only expire once every bucket in it is full again (its TAT in the past), so its expiry
-- is only ever lengthened: another key's or scope's longer period, or a debt settled into a bucket,
-- must not be cut short by this request's shorter one.
local function keepAtLeast(key, ms)
  local ttl = redis.call('PTTL', key)
  if ttl == -1 or (ttl >= 0 and ttl < ms) then redis.call('PEXPIRE', key, ms) end
end

if admitted == 1 then
  for k, b in ipairs(buckets) do keepAtLeast(KEYS[1], ceil(tail[k][2] - now + b.p)) end
  for c = 1, 2 do
    if caps[c] > 0 then
      redis.call('ZADD', KEYS[c + 1], now + leaseTtl, leaseId)
      keepAtLeast(KEYS[c + 1], leaseTtl * 2)
    end
  end
end
return result
