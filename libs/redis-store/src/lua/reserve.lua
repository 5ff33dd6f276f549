--[[
  reserve: takes a lease on one backend a policy chose on a snapshot (the policies without an atomic
  rule: snapshot.lua, `choose`, then this), conditional on its in-flight count, and records that it
  holds the request's blocks (policies that record at routing): atomic, so a saturation valve holds
  under a burst of replicas deciding on the same snapshot.

  1. Purges the pool's expired leases (deadline <= now; usually one empty range read).
  2. If max in-flight (ARGV[9]) > 0 and the backend already has that many leases, nothing changes: a
     conflict (the snapshot was stale), and the caller decides again on fresh figures.
  3. Takes the lease with its prefill tokens (lib/lease-accounting.lua).
  4. If recording (ARGV[7] > 0 and blocks given): a new owner generation if due, then the backend's
     ownership of the chain: only the blocks it does not yet hold in the current generation, at most
     ARGV[7] of them (the caller records the rest with record-ownership.lua).

  KEYS[1]  <ns>:{<tag>}:forgotten        HASH backend id -> '<ms forgotten>[|<retention ms>]'
  KEYS[2]  <ns>:{<tag>}:lease-deadlines  ZSET lease member -> deadline ms, every lease of the pool
  KEYS[3]  <ns>:{<tag>}:inflight         HASH backend id -> leases in flight
  KEYS[4]  <ns>:{<tag>}:pending          HASH backend id -> pending prefill tokens
  KEYS[5]  <ns>:{<tag>}:owners:new       HASH block hash -> owner list, current generation
  KEYS[6]  <ns>:{<tag>}:owners:old       HASH block hash -> owner list, previous generation
  KEYS[7]  <ns>:{<tag>}:generation       STRING ms the current generation started
  ARGV[1]  now, ms since the Unix epoch
  ARGV[2]  pool key prefix '<ns>:{<tag>}:' (prefill keys = prefix..'prefill:'..backend)
  ARGV[3]  block idle TTL, ms (0 = blocks never go idle)
  ARGV[4]  max blocks per pool (the owner index's cap, > 0)
  ARGV[5]  lease id
  ARGV[6]  lease TTL, ms (> 0)
  ARGV[7]  record the backend's ownership of the blocks, at most this many new ones; 0 = do not
  ARGV[8]  backend id
  ARGV[9]  max in-flight leases on the backend (0 = no limit)
  ARGV[10] the lease's prefill tokens
  ARGV[11] the request's block hashes, shallowest first, packed (lib/batched.lua; '' = none)

  Returns {taken, inflight, held}: taken = 1, or 0 on a conflict; inflight = the backend's leases in
  flight afterwards (on a conflict: its count); held = when recording, the leading blocks of the chain
  the backend now holds in the current generation, else 0.
]]

--#include lib/batched.lua
--#include lib/lease-accounting.lua
--#include lib/owner-index.lua

local now = tonumber(ARGV[1])
local prefix = ARGV[2]
local backend = ARGV[8]
local maxInflight = tonumber(ARGV[9])

purgeExpiredLeases(prefix, KEYS[2], KEYS[3], KEYS[4], now)
local inflight = tonumber(redis.call('HGET', KEYS[3], backend)) or 0
if maxInflight > 0 and inflight >= maxInflight then return { 0, inflight, 0 } end
inflight = takeLease(prefix .. 'prefill:' .. backend, KEYS[2], KEYS[3], KEYS[4], backend, ARGV[5], tonumber(ARGV[10]),
  tonumber(ARGV[6]), now)
local held = 0
if tonumber(ARGV[7]) > 0 then
  held = recordHeldChain(KEYS[1], KEYS[5], KEYS[6], KEYS[7], backend, now, tonumber(ARGV[3]), tonumber(ARGV[4]), ARGV[11],
    tonumber(ARGV[7]))
end
return { 1, inflight, held }
