--[[
  route: one routing decision in one round trip. Reads what the policy needs for every candidate
  backend of one pool (leases in flight, pending prefill tokens, leading blocks of the request it
  holds), applies the policy's rule, takes the in-flight lease on the chosen backend and records that
  it now holds the request's blocks: atomic, so router replicas deciding at the same moment see each
  other's leases and ownership, and N replicas route as one. Returns the rule's outcome (its choice,
  reason and cost terms), from which the policy builds its decision without running again.

  1. Purges the pool's expired leases (deadline <= now; usually one empty range read).
  2. Who takes part: every candidate, or for a big pool the shortlist of ARGV[17] (the caller's picks
     and the deepest owners); "candidate" below means one that takes part.
  3. Figures per candidate: inflight/pending (one HMGET each) and, for the cost rule, the match depth by
     binary search over the owner index (lib/owner-index.lua) and when its deepest matched block was
     recorded (read by the search already); 0 and none for the other rules.
  4. Rule (ARGV[8]):
     'cost'         cacheaware's choice (lib/choose-backend.lua) with the parameters of ARGV[9];
     'least-loaded' the fewest leases in flight, ties to the earlier candidate;
     'fixed'        the one candidate given (the caller's policy decided on a snapshot); if max in-flight
                    > 0 and it already has that many leases, nothing changes: a conflict, chosen = 0.
  5. Takes the lease (lib/lease-accounting.lua). Its prefill tokens: for 'cost', the chosen candidate's
     unmatched bytes / bytes per token, rounded up; else ARGV[13].
  6. If recording (ARGV[7] > 0): starts a new owner generation if due, then records the chosen backend
     as holding the chain: only the blocks it does not yet hold in the current generation are written,
     at most ARGV[7] of them (the caller records the rest with record-ownership.lua).

  Work is bounded: reading by the blocks given (the router caps them: maxRoutedBlocks), writing by
  ARGV[7]; no call spreads more than a small constant number of values onto Lua's stack
  (lib/batched.lua), at any block count.

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
  ARGV[7]  record the chosen backend's ownership of the blocks, at most this many new ones; 0 = do not
  ARGV[8]  rule: 'cost' | 'least-loaded' | 'fixed'
  ARGV[9]  'cost': the policy's parameters, one JSON object (cacheaware's CACHE_AWARE_PARAMS by name:
           bytesPerToken, prefillMsPerToken, queueMsPerRequest, minMatchBlocks, saturationInflight,
           spreadAbs, spreadRel, coldLoadFactor, engineWaitingMs, kvFullMs; others ignored); else ''
  ARGV[10] request text bytes
  ARGV[11] request block size, bytes
  ARGV[12] the request's generation budget, tokens (0 when the body sets none)
  ARGV[13] 'least-loaded' and 'fixed': the lease's prefill tokens
  ARGV[14] 'fixed': max in-flight leases on the backend (0 = no limit)
  ARGV[15] the request's block hashes, shallowest first, packed (lib/batched.lua; '' = none)
  ARGV[16] the candidates, in configuration order: a record per candidate between LFs,
           '\n<id>\t<weight> <rank> <waiting> <free>\n…' (ids hold no control characters; numbers as
           JavaScript prints them, which tonumber reads back as the same doubles): its weight,
           rendezvous rank, requests waiting in its engine (0 = unknown), its engine's free KV in tokens
           (-1 = no limit known); the last two from the health poller, via the router. One argument,
           not B: the script reads only the participants' records (one pattern match each, at the
           positions of ARGV[18]) and finds an owner's by one plain search for '\n<id>\t', in C
  ARGV[17] the shortlist: '' = every candidate takes part; else '<owners>;<i>,<j>,…': only the
           candidates at the 1-based positions listed (the caller's picks: rendezvous, load samples)
           and up to <owners> backends with entries on the chain's deepest recorded blocks
           (lib/owner-index.lua deepestOwners) take part, so the work per decision does not grow with
           the pool (issue 15); the rule then runs over them, in configuration order
  ARGV[18] where each record starts in ARGV[16] (1-based), then the position just past the last record:
           B + 1 decimal numbers right-aligned in 10 characters (B = the candidates; 1 for 'fixed').
           Text, not binary: one binary argument makes the client send the whole command as buffers,
           which cost the router more than everything the format saves
  Returns a flat array: [1] chosen participant (1-based among those taking part; 0 = 'fixed'
  conflict), [2] the chosen backend's leases in flight afterwards (on a conflict: its count), [3] the
  rule's reason ('' for 'fixed'), [4] 1 when the cost rule lifted its valve, else 0, [5] 'cost': the
  participants' cost lines packed (lib/choose-backend.lua packCostLines: 72 bytes each), else '',
  [6] when recording, the leading blocks of the chain the chosen backend now holds in the current
  generation (all of them unless ARGV[7] stopped it), else 0, [7] with a shortlist, the participants'
  positions among the candidates, comma-separated, ascending; '' when every candidate took part;
  then per participant k: [4k+4] leases in flight, [4k+5] pending prefill tokens, [4k+6] matched
  blocks, [4k+7] ms its deepest matched block was recorded (-1 when it matches none, or the rule reads
  no depths), all as read before the lease was taken and before this call's own recording rewrote
  anything (the learn stage's eviction evidence: learn.lua).
]]

--#include lib/batched.lua
--#include lib/lease-accounting.lua
--#include lib/owner-index.lua
--#include lib/choose-backend.lua

local now = tonumber(ARGV[1])
local prefix = ARGV[2]
local idleTtl = tonumber(ARGV[3])
local cap = tonumber(ARGV[4])
local leaseId = ARGV[5]
local leaseTtl = tonumber(ARGV[6])
local recordAtMost = tonumber(ARGV[7])
local rule = ARGV[8]
local request = { textBytes = tonumber(ARGV[10]), blockSizeBytes = tonumber(ARGV[11]), maxTokens = tonumber(ARGV[12]) }
local packedBlocks = ARGV[15]
local blockCount = packedBlockCount(packedBlocks)
local blockAt = packedBlockReader(packedBlocks)
local records, recordStarts = ARGV[16], ARGV[18]
local START_WIDTH = 10
local candidateTotal = #recordStarts / START_WIDTH - 1
local sub, match = string.sub, string.match
-- Where candidate j's record starts in ARGV[16] (1-based; candidateTotal + 1: the end).
local function startOf(j)
  return tonumber(sub(recordStarts, START_WIDTH * (j - 1) + 1, START_WIDTH * j))
end
-- Candidate j (1-based): its id and figures, from one anchored match of its record.
local function candidateAt(j)
  local id, weight, rank, waiting, freeTokens = match(records, '^([^\t]*)\t(%S+) (%S+) (%S+) (%S+)\n', startOf(j))
  return { id = id, weight = tonumber(weight), rank = tonumber(rank), waiting = tonumber(waiting), freeTokens = tonumber(freeTokens) }
end
-- The position of the candidate whose id is `id`, or nil: one plain search, then a binary search of the starts.
local function positionOf(id)
  local at = string.find(records, '\n' .. id .. '\t', 1, true)
  if not at then return nil end
  local start, low, high = at + 1, 1, candidateTotal
  while low <= high do
    local middle = math.floor((low + high) / 2)
    local value = startOf(middle)
    if value == start then return middle elseif value < start then low = middle + 1 else high = middle - 1 end
  end
  return nil
end

-- 1. Expired leases.
purgeExpiredLeases(prefix, KEYS[2], KEYS[3], KEYS[4], now)

-- The owner index, before the participants are known: its forget thresholds are filled in below,
-- before anything reads them (index.depths, index.record).
local thresholds = { lookup = {}, record = {} }
local index = newOwnerIndex(KEYS[5], KEYS[6], blockCount, blockAt, thresholds)

-- 2. Who takes part: every candidate, or the shortlist (the caller's picks and the deepest owners).
local positions = {}
local shortlist = ARGV[17]
if shortlist == '' then
  for j = 1, candidateTotal do positions[j] = j end
else
  local separator = string.find(shortlist, ';', 1, true)
  local ownersWanted = tonumber(string.sub(shortlist, 1, separator - 1))
  local taking = {}
  for position in string.gmatch(string.sub(shortlist, separator + 1), '%d+') do
    local j = tonumber(position)
    if j >= 1 and j <= candidateTotal then taking[j] = true end
  end
  if rule == 'cost' and ownersWanted > 0 then
    index.deepestOwners(ownersWanted, function(id)
      local j = positionOf(id)
      if j then taking[j] = true end
      return j ~= nil
    end)
  end
  for j in pairs(taking) do positions[#positions + 1] = j end
  table.sort(positions)
  -- Nothing valid picked (a caller's bug): every candidate, as without a shortlist.
  if #positions == 0 then
    for j = 1, candidateTotal do positions[j] = j end
  end
end
local candidateCount = #positions

-- 3. Figures of those taking part.
local candidates, ids = {}, {}
for k = 1, candidateCount do
  local c = candidateAt(positions[k])
  candidates[k], ids[k] = c, c.id
end
-- Forget marks are rare: skip reading them when there are none.
local marks = {}
if redis.call('HLEN', KEYS[1]) > 0 then marks = hmgetAll(KEYS[1], ids) end
local inflight = hmgetAll(KEYS[3], ids)
local pending = hmgetAll(KEYS[4], ids)
local found = forgetThresholds(ids, marks, now)
thresholds.lookup, thresholds.record = found.lookup, found.record
for j, c in ipairs(candidates) do
  c.inflight = tonumber(inflight[j]) or 0
  c.pending = tonumber(pending[j]) or 0
end
-- Only the cost rule reads match depths ('fixed' was decided on a snapshot that had them).
local depths, matchRecordedAt = {}, {}
if rule == 'cost' then depths, matchRecordedAt = index.depths(ids) end
for _, c in ipairs(candidates) do
  c.depth = depths[c.id] or 0
end

local result = { 0, 0, '', 0, '', 0, shortlist == '' and '' or table.concat(positions, ',') }
for j, c in ipairs(candidates) do
  result[4 * j + 4], result[4 * j + 5], result[4 * j + 6], result[4 * j + 7] = c.inflight, c.pending, c.depth, matchRecordedAt[c.id] or -1
end

-- 4. Rule.
local chosen, tokens
if rule == 'cost' then
  local p = cjson.decode(ARGV[9])
  local reason, valveLifted, lines
  chosen, reason, valveLifted, lines = evaluateCost(candidates, p, request)
  result[3], result[4], result[5] = reason, valveLifted and 1 or 0, packCostLines(lines, candidateCount)
  tokens = math.ceil(math.max(0, request.textBytes - candidates[chosen].depth * request.blockSizeBytes) / p.bytesPerToken)
elseif rule == 'least-loaded' then
  chosen = indexOfLeastLoaded(candidates)
  result[3] = 'least-loaded'
  tokens = tonumber(ARGV[13])
else
  chosen = 1
  tokens = tonumber(ARGV[13])
  local maxInflight = tonumber(ARGV[14])
  if maxInflight > 0 and candidates[1].inflight >= maxInflight then
    result[2] = candidates[1].inflight
    return result
  end
end
local c = candidates[chosen]

-- 5. Lease.
result[1] = chosen
result[2] = takeLease(prefix .. 'prefill:' .. c.id, KEYS[2], KEYS[3], KEYS[4], c.id, leaseId, tokens, leaseTtl, now)

-- 6. Ownership.
if recordAtMost > 0 and blockCount > 0 then
  local turned = rotateGenerations(KEYS[5], KEYS[6], KEYS[7], now, idleTtl, cap)
  if turned then
    -- What the index read so far describes the generations before the turn.
    index = newOwnerIndex(KEYS[5], KEYS[6], blockCount, blockAt, thresholds)
  end
  local added, to = index.record(c.id, now, recordAtMost)
  result[6] = to
  if added > 0 or turned then keepIndexAlive(KEYS[5], KEYS[6], KEYS[7], idleTtl, turned) end
end
return result
