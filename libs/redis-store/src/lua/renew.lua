--[[
  renew: pushes a live lease's deadline to now + lease TTL, for a response that streams longer than
  the TTL. Purges the pool's expired leases first, so a lease that is gone (released, never taken) or
  already past its deadline is not revived: 0 is returned, since other replicas may already have
  stopped counting it.

  KEYS[1]  <ns>:{<tag>}:leases:<backend>   ZSET lease id -> deadline ms
  KEYS[2]  <ns>:{<tag>}:prefill:<backend>  HASH lease id -> pending prefill tokens
  KEYS[3]  <ns>:{<tag>}:lease-deadlines    ZSET lease member -> deadline ms, every lease of the pool
  KEYS[4]  <ns>:{<tag>}:inflight           HASH backend id -> leases in flight
  KEYS[5]  <ns>:{<tag>}:pending            HASH backend id -> pending prefill tokens
  ARGV[1]  now, ms since the Unix epoch
  ARGV[2]  lease id
  ARGV[3]  lease TTL, ms (> 0)
  ARGV[4]  pool key prefix '<ns>:{<tag>}:' (lease keys of purged leases = prefix..'leases:'..backend
           and prefix..'prefill:'..backend)
  ARGV[5]  backend id

  Returns 1 if the lease was renewed, 0 if it no longer exists.
]]

-- Lease accounting, the same in snapshot.lua, reserve.lua and renew.lua (release.lua has the first two
-- functions). The deadline index holds every lease of the pool once, as the member
-- <byte length of backend id>..':'..<backend id>..<lease id>; a lease counts in the inflight and
-- pending hashes exactly while its member is in the index.
local function leaseMember(backend, leaseId)
  return #backend .. ':' .. backend .. leaseId
end

-- Takes one lease off the backend's counters (its field goes when its last lease does).
local function uncount(inflightKey, pendingKey, backend, tokens)
  if redis.call('HINCRBY', inflightKey, backend, -1) <= 0 then
    redis.call('HDEL', inflightKey, backend)
    redis.call('HDEL', pendingKey, backend)
  elseif tokens ~= 0 then
    redis.call('HINCRBY', pendingKey, backend, -tokens)
  end
end

-- Purges every expired lease of the pool (deadline <= now), 100 per ZRANGEBYSCORE: usually one empty
-- range read. Atomic with the rest of the script, so a lease is uncounted once however many race.
local function purgeExpiredLeases(prefix, deadlinesKey, inflightKey, pendingKey, now)
  repeat
    local expired = redis.call('ZRANGEBYSCORE', deadlinesKey, '-inf', now, 'LIMIT', 0, 100)
    for k = 1, #expired do
      local member = expired[k]
      local colon = string.find(member, ':', 1, true)
      local length = tonumber(string.sub(member, 1, colon - 1))
      local backend = string.sub(member, colon + 1, colon + length)
      local leaseId = string.sub(member, colon + length + 1)
      local prefillKey = prefix .. 'prefill:' .. backend
      local tokens = tonumber(redis.call('HGET', prefillKey, leaseId)) or 0
      redis.call('ZREM', prefix .. 'leases:' .. backend, leaseId)
      redis.call('HDEL', prefillKey, leaseId)
      uncount(inflightKey, pendingKey, backend, tokens)
    end
    if #expired > 0 then redis.call('ZREM', deadlinesKey, unpack(expired)) end
  until #expired < 100
end

local now = tonumber(ARGV[1])
local leaseId = ARGV[2]
local leaseTtl = tonumber(ARGV[3])
local member = leaseMember(ARGV[5], leaseId)

purgeExpiredLeases(ARGV[4], KEYS[3], KEYS[4], KEYS[5], now)
if redis.call('ZSCORE', KEYS[3], member) == false then return 0 end
local deadline = now + leaseTtl
redis.call('ZADD', KEYS[1], 'XX', deadline, leaseId)
redis.call('ZADD', KEYS[3], 'XX', deadline, member)
-- The keys live as long as their longest lease (only ever lengthened).
for k = 1, 5 do
  if redis.call('PTTL', KEYS[k]) < leaseTtl then redis.call('PEXPIRE', KEYS[k], leaseTtl) end
end
return 1
