--[[
  release: removes one lease of a backend. Idempotent: releasing twice, or a lease never taken (or
  already expired and purged), changes nothing.

  KEYS[1]  <ns>:{<tag>}:leases:<backend>   ZSET lease id -> deadline ms
  KEYS[2]  <ns>:{<tag>}:prefill:<backend>  HASH lease id -> pending prefill tokens
  ARGV[1]  lease id

  Returns {removed, inflight}: removed = 1 if the lease was there, else 0; inflight = the backend's
  leases in this pool afterwards (expired ones not yet purged included).
]]

local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return { removed, redis.call('ZCARD', KEYS[1]) }
