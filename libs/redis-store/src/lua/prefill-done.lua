--[[
  prefill-done: the lease's request produced its first token.
  1. Its prefill no longer counts as the backend's backlog: sets the lease's pending tokens to 0 and
     takes them off the backend's pending sum, only if the lease exists (a late call after release or
     expiry must not recreate it). Idempotent.
  2. If block hashes are given (policies that record ownership at the first token, not at routing):
     the backend has computed the request's prefix now, so it is recorded as holding the whole chain,
     as route.lua records at routing (a new owner generation if due, only blocks it does not hold yet
     in the current one, at most ARGV[7] of them: the caller records the rest with
     record-ownership.lua). Recorded whether or not the lease still exists: the engine holds the blocks.

  KEYS[1]  <ns>:{<tag>}:prefill:<backend>  HASH lease id -> pending prefill tokens
  KEYS[2]  <ns>:{<tag>}:pending            HASH backend id -> pending prefill tokens
  KEYS[3]  <ns>:{<tag>}:forgotten          HASH backend id -> '<ms forgotten>[|<retention ms>]'
  KEYS[4]  <ns>:{<tag>}:owners:new         HASH block hash -> owner list, current generation
  KEYS[5]  <ns>:{<tag>}:owners:old         HASH block hash -> owner list, previous generation
  KEYS[6]  <ns>:{<tag>}:generation         STRING ms the current generation started
  ARGV[1]  lease id
  ARGV[2]  backend id
  ARGV[3]  now, ms since the Unix epoch
  ARGV[4]  block idle TTL, ms (0 = blocks never go idle)
  ARGV[5]  max blocks per pool (the owner index's cap, > 0)
  ARGV[6]  the request's block hashes, shallowest first, packed (lib/batched.lua; '' = none)
  ARGV[7]  at most this many new blocks are recorded (> 0)

  Returns {1 if the lease exists (its tokens are now 0) else 0, the leading blocks of the chain the
  backend now holds in the current generation (0 without blocks)}.
]]

--#include lib/batched.lua
--#include lib/owner-index.lua

local backendId = ARGV[2]
local recordedTo = recordHeldChain(KEYS[3], KEYS[4], KEYS[5], KEYS[6], backendId, tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7]))

local tokens = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if tokens == nil then return { 0, recordedTo } end
if tokens ~= 0 then
  redis.call('HSET', KEYS[1], ARGV[1], 0)
  redis.call('HINCRBY', KEYS[2], backendId, -tokens)
end
return { 1, recordedTo }
