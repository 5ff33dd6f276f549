--[[
  renew: pushes a live lease's deadline to now + lease TTL, for a response that streams longer than
  the TTL. A lease that is gone (released, never taken) or already past its deadline is not revived:
  an expired lease is purged and 0 returned, since other replicas may already have stopped counting it.

  KEYS[1]  <ns>:{<tag>}:leases:<backend>   ZSET lease id -> deadline ms
  KEYS[2]  <ns>:{<tag>}:prefill:<backend>  HASH lease id -> pending prefill tokens
  ARGV[1]  now, ms since the Unix epoch
  ARGV[2]  lease id
  ARGV[3]  lease TTL, ms (> 0)

  Returns 1 if the lease was renewed, 0 if it no longer exists.
]]

local now = tonumber(ARGV[1])
local leaseTtl = tonumber(ARGV[3])
local deadline = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[2]))
if deadline == nil then return 0 end
if deadline <= now then
  redis.call('ZREM', KEYS[1], ARGV[2])
  redis.call('HDEL', KEYS[2], ARGV[2])
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now + leaseTtl, ARGV[2])
-- The keys live as long as their longest lease (only ever lengthened).
if redis.call('PTTL', KEYS[1]) < leaseTtl then redis.call('PEXPIRE', KEYS[1], leaseTtl) end
if redis.call('PTTL', KEYS[2]) < leaseTtl then redis.call('PEXPIRE', KEYS[2], leaseTtl) end
return 1
