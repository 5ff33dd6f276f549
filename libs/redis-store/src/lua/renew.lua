--[[
  renew: pushes a live lease's deadline to now + lease TTL, for a response that streams longer than
  the TTL. Purges the pool's expired leases first, so a lease that is gone (released, never taken) or
  already past its deadline is not revived: 0 is returned, since other replicas may already have
  stopped counting it.

  KEYS[1]  <ns>:{<tag>}:prefill:<backend>  HASH lease id -> pending prefill tokens
  KEYS[2]  <ns>:{<tag>}:lease-deadlines    ZSET lease member -> deadline ms, every lease of the pool
  KEYS[3]  <ns>:{<tag>}:inflight           HASH backend id -> leases in flight
  KEYS[4]  <ns>:{<tag>}:pending            HASH backend id -> pending prefill tokens
  ARGV[1]  now, ms since the Unix epoch
  ARGV[2]  lease id
  ARGV[3]  lease TTL, ms (> 0)
  ARGV[4]  pool key prefix '<ns>:{<tag>}:' (prefill keys of purged leases = prefix..'prefill:'..backend)
  ARGV[5]  backend id

  Returns 1 if the lease was renewed, 0 if it no longer exists.
]]

--#include lib/lease-accounting.lua

local now = tonumber(ARGV[1])
local leaseId = ARGV[2]
local leaseTtl = tonumber(ARGV[3])
local member = leaseMember(ARGV[5], leaseId)

purgeExpiredLeases(ARGV[4], KEYS[2], KEYS[3], KEYS[4], now)
if redis.call('ZSCORE', KEYS[2], member) == false then return 0 end
local deadline = now + leaseTtl
redis.call('ZADD', KEYS[2], 'XX', deadline, member)
keepLeaseKeysAlive(KEYS[1], KEYS[2], KEYS[3], KEYS[4], leaseTtl)
return 1
