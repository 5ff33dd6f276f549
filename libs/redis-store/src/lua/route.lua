--[[
  route: one routing decision in one round trip. Reads what the policy's atomic rule needs for the
  candidate backends of one pool (leases in flight, pending prefill tokens, the engines' own queue and
  free KV, leading blocks of the request each holds), evaluates the rule, takes the in-flight lease on
  the chosen backend and records that it now holds the request's blocks: atomic, so router replicas
  deciding at the same moment see each other's leases and ownership, and N replicas route as one.
  Returns the rule's choice and detail, and the figures it read, from which the rule's codec and the
  policy build the decision without choosing again.

  The rule is not this file's: its Lua twin (libs/routing/src/rules/<rule>.lua, `evaluateRule`,
  contract in rules/README.md) is spliced in at the line '--#rule' when the store composes the script
  for that rule (src/route-script.ts), so one script per rule and this file names none.

  The candidates are not shipped per call: they are a member set stored once under its version
  (KEYS[8], the version a digest of the ids and weights: src/pool-members.ts), and the engines' figures
  live in the pool's slot (KEYS[9]), written by the calls whose router saw them change (ARGV[14]).

  1. Writes what the call brings: the member set if given (ARGV[12]), engine figures (ARGV[14]), backlogs
     cleared (ARGV[15]). No member set stored and none given: returns {-1} having changed nothing, and
     the caller calls again with it (a new version, or Redis lost it).
  2. Purges the pool's expired leases (deadline <= now; usually one empty range read).
  3. Who takes part: every member, or for a big pool the shortlist of ARGV[11] (the caller's picks
     and the backends with entries on the chain's deepest recorded blocks); "candidate" below means
     one that takes part.
  4. Figures per candidate: inflight/pending/engine (one HMGET each for all) and, when the rule reads
     depths (ARGV[9]), the match depth by binary search over the owner index (lib/owner-index.lua) and
     when its deepest matched block was recorded (read by the search already); 0 and none otherwise.
  5. Rule: evaluateRule(candidates, ARGV[10]) -> chosen, lease tokens, saturated, detail.
  6. Takes the lease (lib/lease-accounting.lua) with the rule's prefill tokens.
  7. If recording (ARGV[7] > 0): starts a new owner generation if due, then records the chosen backend
     as holding the chain: only the blocks it does not yet hold in the current generation are written,
     at most ARGV[7] of them (the caller records the rest with record-ownership.lua).

  Work is bounded: reading by the blocks given (the router caps them: maxRoutedBlocks) and the
  participants, writing by ARGV[7]; no call spreads more than a small constant number of values onto
  Lua's stack (lib/batched.lua), at any block or member count.

  KEYS[1]  <ns>:{<tag>}:forgotten         HASH backend id -> '<ms forgotten>[|<retention ms>]'
  KEYS[2]  <ns>:{<tag>}:lease-deadlines   ZSET lease member -> deadline ms, every lease of the pool
  KEYS[3]  <ns>:{<tag>}:inflight          HASH backend id -> leases in flight
  KEYS[4]  <ns>:{<tag>}:pending           HASH backend id -> pending prefill tokens
  KEYS[5]  <ns>:{<tag>}:owners:new        HASH block hash -> owner list, current generation
  KEYS[6]  <ns>:{<tag>}:owners:old        HASH block hash -> owner list, previous generation
  KEYS[7]  <ns>:{<tag>}:generation        STRING ms the current generation started
  KEYS[8]  <ns>:{<tag>}:members:<version> HASH 'n' -> member count, '#<position>' -> '<id>\t<weight>',
                                          '@<id>' -> position (1-based, configuration order), 'ids' and
                                          'weights': the whole set (lib/pool-members.lua)
  KEYS[9]  <ns>:{<tag>}:engine-figures    HASH backend id -> its engine's waiting and free KV tokens, 8 characters
                                          (read per candidate in step 4); no field: unknown
  ARGV[1]  now, ms since the Unix epoch
  ARGV[2]  pool key prefix '<ns>:{<tag>}:' (prefill keys = prefix..'prefill:'..backend)
  ARGV[3]  block idle TTL, ms (0 = blocks never go idle)
  ARGV[4]  max blocks per pool (the owner index's cap, > 0)
  ARGV[5]  lease id
  ARGV[6]  lease TTL, ms (> 0)
  ARGV[7]  record the chosen backend's ownership of the blocks, at most this many new ones; 0 = do not
  ARGV[8]  the request's block hashes, shallowest first, packed (lib/batched.lua; '' = none)
  ARGV[9]  1 when the rule reads match depths, else 0
  ARGV[10] the rule's argument (its codec's: rules/<rule>.ts)
  ARGV[11] the shortlist: '' = every member takes part; else '<owners>;<i>,<j>,…': only the members at
           the positions listed and up to <owners> backends with entries on the chain's deepest
           recorded blocks (lib/owner-index.lua deepestOwners; only when the rule reads depths) take
           part, so the work per decision does not grow with the pool; the rule then runs over them,
           in configuration order
  ARGV[12] '' = the member set stored at KEYS[8]; else that member set, to be stored first:
           '<id>\t<weight>\n' per member, configuration order (ids hold no control characters)
  ARGV[13] how long a stored member set lives, ms (a set no router uses any more expires)
  ARGV[14] engine figures to store first: '' or '<id>\t<field>\n' per backend (the field as KEYS[9] keeps it)
  ARGV[15] backlogs to clear first: '' or '<backend id>\t<lease id>\n' per lease whose prefill leaves its
           backend's backlog (lib/lease-accounting.lua clearBacklogs: what this router deferred to its
           next decision in the pool rather than a call of its own, src/backlog-clears.ts)
  ARGV[16] blocks the depth search reads first: '' or their 1-based positions in the six-bit
           form (libs/routing rules/six-bit.ts: a width digit, then each position in that many characters
           '0'..'o'; the request's boundaryBlocks: both sides of message boundaries, where matches most
           likely stop; at most MAX_HINTS, those outside the chain ignored). A hint: it changes what is
           read, never a depth or a shortlist (deepestOwners walks the rungs alone)
  Returns a flat array: [1] chosen participant (1-based among those taking part), or -1 when the
  member set is not stored (then nothing else follows), [2] the chosen backend's leases in flight
  afterwards, [3] 1 when the rule reports every participant saturated, else 0, [4] when recording, the
  leading blocks of the chain the chosen backend now holds in the current generation (all of them
  unless ARGV[7] stopped it), else 0, [5] with a shortlist, the participants' positions among the
  members, comma-separated, ascending; '' when every member took part, [6] D = the rule's detail
  values, [7 .. 6+D] the detail, then per participant k: leases in flight, pending prefill tokens,
  matched blocks, ms its deepest matched block was recorded (a decimal string; -1 when it matches none,
  or the rule reads no depths), its engine figures as stored (KEYS[9]'s field; '' = unknown), all as read
  before the lease was taken and before this call's own recording rewrote anything (the learn stage's
  eviction evidence: learn.lua; the codec's explanation: the figures the rule saw).

  The '--#stage <name>' lines mark where each step ends, for `npm run bench:route-stages` (time) and
  `npm run bench:decision-instructions -- --stages` (instructions), which run the script cut at each of
  them; to Redis they are comments. 'call' is what Redis does before the script's first line, and
  'definitions' the included helpers' closures and the arguments read, made anew on every call.
]]

--#stage call
--#include lib/batched.lua
--#include lib/lease-accounting.lua
--#include lib/owner-index.lua
--#include lib/pool-members.lua

--#rule

-- Hints the depth search takes from a call (ARGV[16]; the router sends at most 10).
local MAX_HINTS = 16

--#body
local now = tonumber(ARGV[1])
local prefix = ARGV[2]
local idleTtl = tonumber(ARGV[3])
local cap = tonumber(ARGV[4])
local leaseId = ARGV[5]
local leaseTtl = tonumber(ARGV[6])
local recordAtMost = tonumber(ARGV[7])
local packedBlocks = ARGV[8]
local readsDepths = ARGV[9] == '1'
local blockCount = packedBlockCount(packedBlocks)
local blockAt = packedBlockReader(packedBlocks)
local membersKey, engineKey = KEYS[8], KEYS[9]
--#stage definitions

-- 1. What the call brings. A decision every member takes part in reads the whole set now (its 'ids').
if ARGV[12] ~= '' then storeMembers(membersKey, ARGV[12], tonumber(ARGV[13])) end
local shortlist = ARGV[11]
local ids, weights, memberCount
if shortlist == '' then
  ids, weights = allMembers(membersKey)
  memberCount = ids and #ids
else
  memberCount = tonumber(redis.call('HGET', membersKey, 'n'))
end
if memberCount == nil then return { -1 } end
if ARGV[14] ~= '' then storeEngineFigures(engineKey, ARGV[14]) end
if ARGV[15] ~= '' then clearBacklogs(prefix, KEYS[4], ARGV[15]) end
--#stage members

-- 2. Expired leases.
purgeExpiredLeases(prefix, KEYS[2], KEYS[3], KEYS[4], now)
--#stage purge

-- The owner index, before the participants are known: its forget thresholds are filled in below,
-- before anything reads them (index.depths, index.record).
local thresholds = { lookup = {}, record = {} }
-- The hints: message boundaries' blocks (ARGV[16]), those within the chain; in the six-bit form, read by
-- one string.byte (a decimal list cost a tonumber each); the first MAX_HINTS within the chain. A text
-- longer than MAX_HINTS positions of width 4 is a caller's bug: no hints.
local hints, hintText = {}, ARGV[16]
if readsDepths and #hintText > 1 and #hintText <= 1 + 4 * MAX_HINTS then
  local codes = { string.byte(hintText, 1, #hintText) }
  local width, count = codes[1] - 48, 0
  for at = 2, #codes - width + 1, width do
    local i = 0
    for k = at, at + width - 1 do i = i * 64 + codes[k] - 48 end
    if i >= 1 and i <= blockCount and count < MAX_HINTS then
      count = count + 1
      hints[count] = i
    end
  end
end
local index = newOwnerIndex(KEYS[5], KEYS[6], blockCount, blockAt, thresholds, hints)

-- 3. Who takes part: every member, or the shortlist (the caller's picks and the deepest owners). A
-- shortlisted position is kept as the decimal string it came as too (`nameOf`): its field name and its
-- place in the reply, where turning a number into a string costs ~3k instructions (sprintf).
local positions, nameOf = {}, {}
if shortlist == '' then
  for j = 1, memberCount do positions[j] = j end
else
  local separator = string.find(shortlist, ';', 1, true)
  local ownersWanted = tonumber(string.sub(shortlist, 1, separator - 1))
  for name in string.gmatch(string.sub(shortlist, separator + 1), '%d+') do
    local j = tonumber(name)
    if j >= 1 and j <= memberCount then nameOf[j] = name end
  end
  if readsDepths and ownersWanted > 0 then
    index.deepestOwners(ownersWanted, function(batch)
      local names = positionNamesOf(membersKey, batch)
      for k = 1, #batch do
        local name = names[k]
        if name then nameOf[tonumber(name)] = name end
      end
      return names
    end)
  end
  for j in pairs(nameOf) do positions[#positions + 1] = j end
  table.sort(positions)
  -- Nothing valid picked (a caller's bug): every member, as without a shortlist.
  if #positions == 0 then
    for j = 1, memberCount do
      positions[j] = j
      nameOf[j] = tostring(j)
    end
  end
end
local candidateCount = #positions
--#stage participants

-- 4. Figures of those taking part.
local names = {}
if ids == nil then
  for k = 1, candidateCount do names[k] = nameOf[positions[k]] end
  ids, weights = membersAt(membersKey, names)
end
-- Forget marks are rare: with none, every entry counts (no thresholds) and nothing is read for them.
if redis.call('HLEN', KEYS[1]) > 0 then
  local found = forgetThresholds(ids, hmgetAll(KEYS[1], ids), now)
  thresholds.lookup, thresholds.record = found.lookup, found.record
end
local inflight = hmgetAll(KEYS[3], ids)
local pending = hmgetAll(KEYS[4], ids)
local engine = hmgetAll(engineKey, ids)
--#stage figures
local depth, matchRecordedAt = {}, {}
if readsDepths then depth, matchRecordedAt = index.depths(ids) end
--#stage depths
-- The candidates' figures as columns, one array per figure (the rules' contract: libs/routing/src/rules/
-- README.md), the counts converted in place in the arrays HMGET returned: a table of named fields per
-- candidate cost ~7.7k instructions each (callgrind, issue 28), an array slot a few hundred.
local waiting, freeTokens = {}, {}
local byte = string.byte
for k = 1, candidateCount do
  inflight[k] = knownNumbers[inflight[k]] or numberOf(inflight[k]) or 0
  pending[k] = knownNumbers[pending[k]] or numberOf(pending[k]) or 0
  depth[k] = depth[k] or 0
  -- The engine's figures from its field (none, or not 8 characters: unknown, 0 waiting and -1 free): 8
  -- characters of 6 bits, '0' (48) to 'o' (111), waiting in 3, free KV tokens + 1 in 5 (pool-members.ts
  -- engineFiguresField).
  -- One string.byte, inline (no call per candidate): issue 28 measured both steps in docs/results.md.
  local field = engine[k]
  if field and #field == 8 then
    local a, b, c, d, e, f, g, h = byte(field, 1, 8)
    waiting[k] = ((a - 48) * 64 + b - 48) * 64 + c - 48
    freeTokens[k] = ((((d - 48) * 64 + e - 48) * 64 + f - 48) * 64 + g - 48) * 64 + h - 49
  else
    waiting[k], freeTokens[k] = 0, -1
  end
end
local candidates = {
  count = candidateCount, id = ids, weight = weights, position = positions, inflight = inflight, pending = pending,
  depth = depth, waiting = waiting, freeTokens = freeTokens,
}

-- 5. Rule.
local chosen, leaseTokens, saturated, detail = evaluateRule(candidates, ARGV[10])
local chosenId = ids[chosen]
--#stage rule

local result = { chosen, 0, saturated and 1 or 0, 0, table.concat(names, ','), #detail }
for k = 1, #detail do result[6 + k] = detail[k] end
local at = 6 + #detail
for k = 1, candidateCount do
  result[at + 1], result[at + 2], result[at + 3] = inflight[k], pending[k], depth[k]
  result[at + 4], result[at + 5] = matchRecordedAt[k] or -1, engine[k] or ''
  at = at + 5
end
--#stage reply

-- 6. Lease.
result[2] = takeLease(prefix .. 'prefill:' .. chosenId, KEYS[2], KEYS[3], KEYS[4], chosenId, leaseId, leaseTokens, leaseTtl, now)
--#stage lease

-- 7. Ownership.
if recordAtMost > 0 and blockCount > 0 then
  local turned = rotateGenerations(KEYS[5], KEYS[6], KEYS[7], now, idleTtl, cap)
  if turned then
    -- What the index read so far describes the generations before the turn.
    index = newOwnerIndex(KEYS[5], KEYS[6], blockCount, blockAt, thresholds, hints)
  end
  local added, to = index.record(chosenId, now, recordAtMost)
  result[4] = to
  if added > 0 or turned then keepIndexAlive(KEYS[5], KEYS[6], KEYS[7], idleTtl, turned) end
end
return result
