--[[
  prefill-done: the lease's request produced its first token, so its prefill no longer counts as the
  backend's backlog: sets the lease's pending tokens to 0 and takes them off the backend's pending sum,
  only if the lease exists (a late call after release or expiry must not recreate it). Idempotent.

  KEYS[1]  <ns>:{<tag>}:prefill:<backend>  HASH lease id -> pending prefill tokens
  KEYS[2]  <ns>:{<tag>}:pending            HASH backend id -> pending prefill tokens
  ARGV[1]  lease id
  ARGV[2]  backend id

  Returns 1 if the lease exists (its tokens are now 0), 0 if not.
]]

local tokens = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if tokens == nil then return 0 end
if tokens ~= 0 then
  redis.call('HSET', KEYS[1], ARGV[1], 0)
  redis.call('HINCRBY', KEYS[2], ARGV[2], -tokens)
end
return 1
