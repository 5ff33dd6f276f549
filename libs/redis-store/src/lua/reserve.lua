--[[
  reserve: takes an in-flight lease on one backend and records, speculatively, that the backend now
  holds the request's prefix blocks. Atomic, so a limit on in-flight leases holds across router
  replicas under a burst: the check and the take are one step.

  1. Purges the pool's expired leases (deadline <= now; usually one empty range read).
  2. If max in-flight > 0 and the backend already has that many leases (its inflight field): returns
     {0, in-flight} and changes nothing (a conflict: the caller decided on a stale snapshot and
     decides again).
  3. Adds the lease (deadline = now + lease TTL) to the pool's deadline index and its pending prefill
     tokens to the backend's prefill hash, and counts it in the inflight/pending hashes (a lease id
     already live is given the new deadline and tokens and still counts once). The lease keys expire
     when their last lease would (PEXPIRE, only ever lengthened), so a vanished backend leaves nothing.
  4. Records ownership deepest block first: HSET block backend now, PEXPIRE block idle TTL, ZADD lru.
     A block this backend touched within the refresh granularity is skipped (a repeated turn costs one
     HGET per block). Deepest first, and an LRU score tie-break that grows by 1/2048 ms per block
     written (capped at 2047/2048), make shallower blocks never older than deeper ones: eviction and
     idle expiry take a chain from its tail, which keeps every backend's blocks prefix-closed.
  5. Drops idle LRU members (their block keys have expired) and, over the cap, pops the oldest blocks
     down to cap - floor(cap/16) and deletes their block keys (for every backend).

  KEYS[1]  <ns>:{<tag>}:prefill:<backend>  HASH lease id -> pending prefill tokens
  KEYS[2]  <ns>:{<tag>}:lru                ZSET block hash -> last touch ms (+ tie-break < 1 ms)
  KEYS[3]  <ns>:{<tag>}:forgotten          HASH backend id -> ms it was forgotten
  KEYS[4]  <ns>:{<tag>}:lease-deadlines    ZSET lease member -> deadline ms, every lease of the pool
  KEYS[5]  <ns>:{<tag>}:inflight           HASH backend id -> leases in flight
  KEYS[6]  <ns>:{<tag>}:pending            HASH backend id -> pending prefill tokens
  ARGV[1]  now, ms since the Unix epoch
  ARGV[2]  lease id
  ARGV[3]  lease TTL, ms (> 0)
  ARGV[4]  prefill tokens the lease carries (integer >= 0)
  ARGV[5]  max in-flight leases on this backend (0 = no limit)
  ARGV[6]  block idle TTL, ms (0 = blocks never go idle)
  ARGV[7]  refresh granularity, ms
  ARGV[8]  max blocks per pool (the LRU cap, > 0)
  ARGV[9]  pool key prefix '<ns>:{<tag>}:' (block keys = prefix..'blk:'..hash, prefill keys of purged
           leases = prefix..'prefill:'..backend)
  ARGV[10] backend id
  ARGV[11 .. #ARGV] block hashes, shallowest first, as decimal integers (may be none)

  Returns {taken, inflight}: taken = 1 if the lease was taken, 0 on conflict; inflight = the backend's
  leases in this pool afterwards.
]]

--#include lib/lease-accounting.lua

local now = tonumber(ARGV[1])
local leaseId = ARGV[2]
local leaseTtl = tonumber(ARGV[3])
local prefillTokens = tonumber(ARGV[4])
local maxInflight = tonumber(ARGV[5])
local idleTtl = tonumber(ARGV[6])
local refreshBefore = now - tonumber(ARGV[7])
local cap = tonumber(ARGV[8])
local prefix = ARGV[9]
local backend = ARGV[10]

-- 1. Purge expired leases.
purgeExpiredLeases(prefix, KEYS[4], KEYS[5], KEYS[6], now)

-- 2. Conflict check.
local inflight = tonumber(redis.call('HGET', KEYS[5], backend)) or 0
if maxInflight > 0 and inflight >= maxInflight then
  return { 0, inflight }
end

-- 3. Take the lease.
local deadline = now + leaseTtl
local previousTokens = tonumber(redis.call('HGET', KEYS[1], leaseId)) or 0
redis.call('HSET', KEYS[1], leaseId, prefillTokens)
if redis.call('ZADD', KEYS[4], deadline, leaseMember(backend, leaseId)) == 1 then
  inflight = redis.call('HINCRBY', KEYS[5], backend, 1)
  redis.call('HINCRBY', KEYS[6], backend, prefillTokens)
else
  redis.call('HINCRBY', KEYS[6], backend, prefillTokens - previousTokens)
end
for _, key in ipairs({ KEYS[1], KEYS[4], KEYS[5], KEYS[6] }) do
  extendTtl(key, leaseTtl)
end

-- 4. Record ownership, deepest block first.
local forgot = tonumber(redis.call('HGET', KEYS[3], backend)) or -1
local written = 0
local lruArgs = {} -- score, member, score, member, ...: one ZADD per 500 blocks
local function flushLru()
  if #lruArgs > 0 then
    redis.call('ZADD', KEYS[2], unpack(lruArgs))
    lruArgs = {}
  end
end
for i = #ARGV, 11, -1 do
  local hash = ARGV[i]
  local blockKey = prefix .. 'blk:' .. hash
  local touched = tonumber(redis.call('HGET', blockKey, backend))
  if touched == nil or touched < refreshBefore or touched <= forgot then
    redis.call('HSET', blockKey, backend, now)
    if idleTtl > 0 then redis.call('PEXPIRE', blockKey, idleTtl) end
    lruArgs[#lruArgs + 1] = now + math.min(written, 2047) / 2048
    lruArgs[#lruArgs + 1] = hash
    written = written + 1
    if #lruArgs >= 1000 then flushLru() end
  end
end
flushLru()

-- 5. Forget idle blocks, trim over the cap.
if written > 0 then
  if idleTtl > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (now - idleTtl))
    extendTtl(KEYS[2], idleTtl)
  end
  local size = redis.call('ZCARD', KEYS[2])
  if size > cap then
    local excess = size - (cap - math.floor(cap / 16))
    while excess > 0 do
      local count = math.min(excess, 1000)
      local popped = redis.call('ZPOPMIN', KEYS[2], count)
      local blockKeys = {}
      for k = 1, #popped, 2 do
        blockKeys[#blockKeys + 1] = prefix .. 'blk:' .. popped[k]
      end
      if #blockKeys > 0 then redis.call('DEL', unpack(blockKeys)) end
      excess = excess - count
    end
  end
end
return { 1, inflight }
