--[[
  prefill-done: the lease's request produced its first token, so its prefill no longer counts as the
  backend's backlog: sets the lease's pending tokens to 0, only if the lease exists (a late call after
  release or expiry must not recreate it). Idempotent.

  KEYS[1]  <ns>:{<tag>}:prefill:<backend>  HASH lease id -> pending prefill tokens
  ARGV[1]  lease id

  Returns 1 if the lease exists (its tokens are now 0), 0 if not.
]]

if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], 0)
return 1
