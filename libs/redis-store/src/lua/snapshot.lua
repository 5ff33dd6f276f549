--[[
  snapshot: the figures a policy decides on, for every candidate backend of one pool, in one round
  trip, without taking a lease or recording anything: for policies whose choice is not an atomic rule
  (reserve.lua then takes the lease) and for dry runs (/debug/route). Purges the
  pool's expired leases first, then reads each backend's leases in flight and pending prefill tokens
  (one HMGET each for all backends) and its match depth by binary search over the owner index
  (lib/owner-index.lua): O(log(blocks) x distinct depths) block reads, not backends x blocks; and when
  the deepest matched block was recorded (read by that search already).

  KEYS[1]  <ns>:{<tag>}:forgotten        HASH backend id -> '<ms forgotten>[|<retention ms>]'
  KEYS[2]  <ns>:{<tag>}:lease-deadlines  ZSET lease member -> deadline ms, every lease of the pool
  KEYS[3]  <ns>:{<tag>}:inflight         HASH backend id -> leases in flight
  KEYS[4]  <ns>:{<tag>}:pending          HASH backend id -> pending prefill tokens
  KEYS[5]  <ns>:{<tag>}:owners:new       HASH block hash -> owner list, current generation
  KEYS[6]  <ns>:{<tag>}:owners:old       HASH block hash -> owner list, previous generation
  ARGV[1]  now, ms since the Unix epoch
  ARGV[2]  pool key prefix '<ns>:{<tag>}:' (prefill keys of purged leases = prefix..'prefill:'..backend)
  ARGV[3]  the request's block hashes, shallowest first, packed (lib/batched.lua; '' = none)
  ARGV[4 .. #ARGV]  backend ids (B = #ARGV - 3)

  Returns a flat array of 4*B integers; for the j-th backend (1-based):
    [4j-3] leases in flight (unexpired), [4j-2] pending prefill tokens, [4j-1] matched blocks (0..N),
    [4j] ms its deepest matched block was recorded (-1 when it matches none): the oldest entry of the
    matched prefix, the learn stage's eviction evidence (learn.lua), read before the request's own
    recording (reserve.lua, prefill-done.lua) can rewrite it
]]

--#include lib/batched.lua
--#include lib/lease-accounting.lua
--#include lib/owner-index.lua

local now = tonumber(ARGV[1])
local prefix = ARGV[2]
local packedBlocks = ARGV[3]
local blockCount = packedBlockCount(packedBlocks)
local backendCount = #ARGV - 3

purgeExpiredLeases(prefix, KEYS[2], KEYS[3], KEYS[4], now)
if backendCount == 0 then return {} end

local ids = {}
for j = 1, backendCount do ids[j] = ARGV[3 + j] end
-- Forget marks are rare: skip reading them when there are none.
local marks = {}
if redis.call('HLEN', KEYS[1]) > 0 then marks = hmgetAll(KEYS[1], ids) end
local inflight = hmgetAll(KEYS[3], ids)
local pending = hmgetAll(KEYS[4], ids)
local index = newOwnerIndex(KEYS[5], KEYS[6], blockCount, packedBlockReader(packedBlocks), forgetThresholds(ids, marks, now))

local depths, matchRecordedAt = index.depths(ids)
local result = {}
for j = 1, backendCount do
  result[4 * j - 3] = tonumber(inflight[j]) or 0
  result[4 * j - 2] = tonumber(pending[j]) or 0
  result[4 * j - 1] = depths[j]
  result[4 * j] = tonumber(matchRecordedAt[j]) or -1
end
return result
