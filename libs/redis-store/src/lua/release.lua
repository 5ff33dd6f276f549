--[[
  release: removes one lease of a backend and uncounts it. Idempotent: releasing twice, or a lease
  never taken (or already expired and purged), changes nothing.

  With block hashes (ARGV[6], non-empty): the request's first output came with its end (a non-streaming
  response: the engine answered once generation was done), so this call also does what prefill-done.lua
  does for a stream at its first output: records the backend as holding the chain (a new owner
  generation if due, only blocks it does not hold yet in the current one, at most ARGV[7] of them: the
  caller records the rest with record-ownership.lua), whether or not the lease still exists. The lease's
  pending prefill tokens leave the backlog with the lease itself. One call after the response instead
  of two.

  KEYS[1]  <ns>:{<tag>}:prefill:<backend>  HASH lease id -> pending prefill tokens
  KEYS[2]  <ns>:{<tag>}:lease-deadlines    ZSET lease member -> deadline ms, every lease of the pool
  KEYS[3]  <ns>:{<tag>}:inflight           HASH backend id -> leases in flight
  KEYS[4]  <ns>:{<tag>}:pending            HASH backend id -> pending prefill tokens
  KEYS[5]  <ns>:{<tag>}:forgotten          HASH backend id -> '<ms forgotten>[|<retention ms>]'
  KEYS[6]  <ns>:{<tag>}:owners:new         HASH block hash -> owner list, current generation
  KEYS[7]  <ns>:{<tag>}:owners:old         HASH block hash -> owner list, previous generation
  KEYS[8]  <ns>:{<tag>}:generation         STRING ms the current generation started
  ARGV[1]  lease id
  ARGV[2]  backend id
  ARGV[3]  now, ms since the Unix epoch
  ARGV[4]  block idle TTL, ms (0 = blocks never go idle)
  ARGV[5]  max blocks per pool (the owner index's cap, > 0)
  ARGV[6]  the request's block hashes, shallowest first, packed (lib/batched.lua; '' = record nothing)
  ARGV[7]  at most this many new blocks are recorded (> 0)

  Returns {removed, inflight, held}: removed = 1 if the lease was there, else 0; inflight = the
  backend's leases in this pool afterwards (expired ones not yet purged included); held = the leading
  blocks of the chain the backend now holds in the current generation (0 without blocks).
]]

--#include lib/lease-accounting.lua
--#include lib/batched.lua
--#include lib/owner-index.lua

--#body
local leaseId = ARGV[1]
local backend = ARGV[2]
-- Without blocks (a stream's release: its first output recorded them) nothing is recorded and nothing converted.
-- The idle TTL, the cap and the most new blocks are the same in every call of a router: memoized.
local recordedTo = 0
if ARGV[6] ~= '' then
  recordedTo = recordHeldChain(KEYS[5], KEYS[6], KEYS[7], KEYS[8], backend, tonumber(ARGV[3]), numberOf(ARGV[4]),
    numberOf(ARGV[5]), ARGV[6], numberOf(ARGV[7]))
end

local tokens = tonumber(redis.call('HGET', KEYS[1], leaseId)) or 0
redis.call('HDEL', KEYS[1], leaseId)
local removed = redis.call('ZREM', KEYS[2], leaseMember(backend, leaseId))
local inflight
if removed == 1 then
  inflight = uncount(KEYS[3], KEYS[4], backend, tokens)
else
  inflight = tonumber(redis.call('HGET', KEYS[3], backend)) or 0
end
return { removed, inflight, recordedTo }
