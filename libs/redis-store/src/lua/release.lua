--[[
  release: removes one lease of a backend and uncounts it. Idempotent: releasing twice, or a lease
  never taken (or already expired and purged), changes nothing.

  KEYS[1]  <ns>:{<tag>}:prefill:<backend>  HASH lease id -> pending prefill tokens
  KEYS[2]  <ns>:{<tag>}:lease-deadlines    ZSET lease member -> deadline ms, every lease of the pool
  KEYS[3]  <ns>:{<tag>}:inflight           HASH backend id -> leases in flight
  KEYS[4]  <ns>:{<tag>}:pending            HASH backend id -> pending prefill tokens
  ARGV[1]  lease id
  ARGV[2]  backend id

  Returns {removed, inflight}: removed = 1 if the lease was there, else 0; inflight = the backend's
  leases in this pool afterwards (expired ones not yet purged included).
]]

--#include lib/lease-accounting.lua

local leaseId = ARGV[1]
local backend = ARGV[2]
local tokens = tonumber(redis.call('HGET', KEYS[1], leaseId)) or 0
redis.call('HDEL', KEYS[1], leaseId)
local removed = redis.call('ZREM', KEYS[2], leaseMember(backend, leaseId))
if removed == 1 then uncount(KEYS[3], KEYS[4], backend, tokens) end
return { removed, tonumber(redis.call('HGET', KEYS[3], backend)) or 0 }
