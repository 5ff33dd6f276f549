--[[
  route: one routing decision in one round trip. Reads what the policy needs for every candidate
  backend of one pool (leases in flight, pending prefill tokens, leading blocks of the request it
  holds), applies the policy's rule, takes the in-flight lease on the chosen backend and records that
  it now holds the request's blocks: atomic, so router replicas deciding at the same moment see each
  other's leases and ownership, and N replicas route as one.

  1. Purges the pool's expired leases (deadline <= now; usually one empty range read).
  2. Figures per candidate: inflight/pending (one HMGET each) and, for the cost rule, the match depth by
     binary search over the owner index (lib/owner-index.lua); 0 for the other rules.
  3. Rule (ARGV[8]):
     'cost'         cacheaware's choice (lib/choose-backend.lua);
     'least-loaded' the fewest leases in flight, ties to the earlier candidate;
     'fixed'        the one candidate given (the caller's policy decided on a snapshot); if max in-flight
                    > 0 and it already has that many leases, nothing changes: a conflict, chosen = 0.
  4. Takes the lease (lib/lease-accounting.lua). Its prefill tokens: ARGV[19] for 'fixed', else the
     chosen candidate's unmatched bytes / bytes per token, rounded up.
  5. If recording (ARGV[7] = 1): starts a new owner generation if due, then records the chosen backend
     as holding the whole chain (only the blocks it does not yet hold in the current generation are
     written).

  KEYS[1]  <ns>:{<tag>}:forgotten        HASH backend id -> ms it was forgotten
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
  ARGV[7]  1 = record the chosen backend's ownership of the blocks, 0 = do not
  ARGV[8]  rule: 'cost' | 'least-loaded' | 'fixed'
  ARGV[9 .. 16]  cost rule parameters: bytes per token, prefill ms per token, queue ms per request,
                 min match blocks, saturation in-flight, spread abs, spread rel, cold load factor
                 (bytes per token also sizes the lease's prefill tokens under 'least-loaded')
  ARGV[17] request text bytes
  ARGV[18] request block size, bytes
  ARGV[19] 'fixed': the lease's prefill tokens
  ARGV[20] 'fixed': max in-flight leases on the backend (0 = no limit)
  ARGV[21] cost rule: ms per request waiting in an engine's own queue
  ARGV[22] cost rule: ms charged where the request's KV would not fit
  ARGV[23] the request's generation budget, tokens (0 when the body sets none)
  ARGV[24] B, the number of candidates (1 for 'fixed')
  ARGV[25 .. 24+5B]  per candidate, in configuration order: backend id, weight, rendezvous rank,
                     requests waiting in its engine (0 = unknown), its engine's free KV in tokens
                     (-1 = no limit known); the last two from the health poller, via the router
  ARGV[25+5B .. #ARGV]  the request's block hashes, shallowest first, as decimal integers (may be none)

  Returns a flat array of 2 + 3*B integers: [1] chosen candidate (1-based; 0 = 'fixed' conflict),
  [2] the chosen backend's leases in flight afterwards (on a conflict: its count), then per candidate j:
  [3j] leases in flight, [3j+1] pending prefill tokens, [3j+2] matched blocks, all as read before the
  lease was taken.
]]

--#include lib/lease-accounting.lua
--#include lib/owner-index.lua
--#include lib/choose-backend.lua

local now = tonumber(ARGV[1])
local prefix = ARGV[2]
local idleTtl = tonumber(ARGV[3])
local cap = tonumber(ARGV[4])
local leaseId = ARGV[5]
local leaseTtl = tonumber(ARGV[6])
local recording = ARGV[7] == '1'
local rule = ARGV[8]
local request = { textBytes = tonumber(ARGV[17]), blockSizeBytes = tonumber(ARGV[18]), maxTokens = tonumber(ARGV[23]) }
local candidateCount = tonumber(ARGV[24])
local firstBlock = 25 + 5 * candidateCount
local blockCount = #ARGV - firstBlock + 1

-- 1. Expired leases.
purgeExpiredLeases(prefix, KEYS[2], KEYS[3], KEYS[4], now)

-- 2. Figures.
local candidates, ids = {}, {}
for j = 1, candidateCount do
  local at = 25 + 5 * (j - 1)
  ids[j] = ARGV[at]
  candidates[j] = {
    id = ARGV[at],
    weight = tonumber(ARGV[at + 1]),
    rank = tonumber(ARGV[at + 2]),
    waiting = tonumber(ARGV[at + 3]),
    freeTokens = tonumber(ARGV[at + 4]),
  }
end
-- Forget marks are rare: skip reading them when there are none.
local marks = {}
if redis.call('HLEN', KEYS[1]) > 0 then marks = redis.call('HMGET', KEYS[1], unpack(ids)) end
local inflight = redis.call('HMGET', KEYS[3], unpack(ids))
local pending = redis.call('HMGET', KEYS[4], unpack(ids))
local forgottenById = {}
for j, c in ipairs(candidates) do
  forgottenById[c.id] = tonumber(marks[j])
  c.inflight = tonumber(inflight[j]) or 0
  c.pending = tonumber(pending[j]) or 0
end
local index = newOwnerIndex(KEYS[5], KEYS[6], blockCount,
  function(i) return ARGV[firstBlock + i - 1] end,
  forgottenById)
-- Only the cost rule reads match depths ('fixed' was decided on a snapshot that had them).
local depths = rule == 'cost' and index.depths(ids) or {}
for _, c in ipairs(candidates) do
  c.depth = depths[c.id] or 0
end

local result = { 0, 0 }
for j, c in ipairs(candidates) do
  result[3 * j], result[3 * j + 1], result[3 * j + 2] = c.inflight, c.pending, c.depth
end

-- 3. Rule.
local params = costParams(9, 21, 22)
local chosen
if rule == 'cost' then
  chosen = chooseByCost(candidates, params, request)
elseif rule == 'least-loaded' then
  chosen = indexOfLeastLoaded(candidates)
else
  chosen = 1
  local maxInflight = tonumber(ARGV[20])
  if maxInflight > 0 and candidates[1].inflight >= maxInflight then
    result[2] = candidates[1].inflight
    return result
  end
end
local c = candidates[chosen]

-- 4. Lease.
local tokens
if rule == 'fixed' then
  tokens = tonumber(ARGV[19])
else
  tokens = math.ceil(math.max(0, request.textBytes - c.depth * request.blockSizeBytes) / params.bytesPerToken)
end
result[1] = chosen
result[2] = takeLease(prefix .. 'prefill:' .. c.id, KEYS[2], KEYS[3], KEYS[4], c.id, leaseId, tokens, leaseTtl, now)

-- 5. Ownership.
if recording and blockCount > 0 then
  local turned = rotateGenerations(KEYS[5], KEYS[6], KEYS[7], now, idleTtl, cap)
  if turned then
    -- What the index read so far describes the generations before the turn.
    index = newOwnerIndex(KEYS[5], KEYS[6], blockCount,
      function(i) return ARGV[firstBlock + i - 1] end,
      forgottenById)
  end
  if index.record(c.id, now) > 0 or turned then keepIndexAlive(KEYS[5], KEYS[6], KEYS[7], idleTtl, turned) end
end
return result
