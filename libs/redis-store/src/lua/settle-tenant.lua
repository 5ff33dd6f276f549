--[[
  settle-tenant: the end (or the renewal) of a request admitted by admit-tenant.lua.

  'release': the request is over. Its concurrency leases go, and each token bucket is corrected by
  what the request really used against what admission reserved (prompt estimate + max_tokens, settled
  from the response's usage): n units fewer move the bucket's TAT back by n · T/L (never before now: a
  bucket cannot hold more than its limit), n more move it forward (the overdraft is paid by the next
  requests, never refused after the fact).
  'renew': a long request is still running; its leases get a new deadline (buckets untouched).

  KEYS[1]  <ns>:{tenant:<tag>}:rates            HASH bucket field -> TAT ms
  KEYS[2]  <ns>:{tenant:<tag>}:leases:tenant    ZSET lease id -> deadline ms
  KEYS[3]  <ns>:{tenant:<tag>}:leases:key:<id>  ZSET lease id -> deadline ms
  ARGV[1]  '' in production: now is Redis's own TIME, so replicas whose clocks disagree share one
           timeline; a number (ms since the Unix epoch) only from tests that move time
           (TenantLimits `clock: 'caller'`)
  ARGV[2]  lease id
  ARGV[3]  'release' | 'renew'
  ARGV[4]  release: corrections, one JSON array of {f: field, d: units used − units reserved, p: period
           ms, l: limit per period}; renew: the lease TTL, ms

  Returns the number of leases removed ('release') or renewed ('renew'): 0 when they had expired.
]]

local now = tonumber(ARGV[1])
if now == nil then
  local time = redis.call('TIME')
  now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
local leaseId = ARGV[2]
local count = 0

-- Expiries are only lengthened (as in admit-tenant.lua): a renewed lease, or a debt pushed into a
-- bucket, must outlive the expiry its admission set.
local function keepAtLeast(key, ms)
  local ttl = redis.call('PTTL', key)
  if ttl == -1 or (ttl >= 0 and ttl < ms) then redis.call('PEXPIRE', key, ms) end
end

if ARGV[3] == 'renew' then
  local deadline = now + tonumber(ARGV[4])
  for c = 2, 3 do
    -- Only a lease that is still there and not expired; one past its deadline is gone (as if purged).
    local current = tonumber(redis.call('ZSCORE', KEYS[c], leaseId))
    if current and current > now then
      redis.call('ZADD', KEYS[c], deadline, leaseId)
      keepAtLeast(KEYS[c], 2 * tonumber(ARGV[4]))
      count = count + 1
    end
  end
  return count
end

for c = 2, 3 do count = count + redis.call('ZREM', KEYS[c], leaseId) end
for _, b in ipairs(cjson.decode(ARGV[4])) do
  -- A bucket with no TAT (or one in the past) is full: a refund changes nothing, a debt starts at now.
  local tat = math.max(tonumber(redis.call('HGET', KEYS[1], b.f)) or now, now)
  local corrected = math.max(now, tat + b.d * b.p / b.l)
  if corrected > now then
    redis.call('HSET', KEYS[1], b.f, string.format('%.17g', corrected))
    keepAtLeast(KEYS[1], math.ceil(corrected - now + b.p))
  elseif b.d < 0 then
    redis.call('HDEL', KEYS[1], b.f)
  end
end
return count
