--[[
  apply-kv-events: applies one batch of an engine's KV-cache events (vLLM's BlockStored, BlockRemoved,
  AllBlocksCleared, published per data-parallel rank) to a pool's owner index for one backend rank,
  atomically. The health poller's indexer names the blocks as the router does (hashTokenBlock53 over
  each block's token ids, chained on its parent's name) and sends them in the batch's order:
  1. a new owner generation if due (as record-ownership.lua);
  2. ARGV[5] = 1 when the batch cleared the engine's cache (AllBlocksCleared, or the indexer lost track
     of the stream and resynchronises): forget-backend semantics, the rank's entries recorded before
     now stop counting at once (the mark is now - 1, so the stores that follow in this call count);
  3. each op in order:
     - 'S<anchor>:<packed blocks>': the blocks a BlockStored event stored, shallowest first, after the
       block named <anchor> (its parent; '' = they start a chain). As record-ownership.lua: unless the
       rank holds the anchor in the current generation (recorded after its forget mark), nothing is
       written and the op's result is -1, and the indexer sends the whole chain from its first block
       (anchor '') in a further call; otherwise the blocks past the rank's depth among them are
       recorded, stamped now (no newer than the anchor: lib/owner-index.lua index.record). So the
       rank's blocks stay prefix-closed in `new`, which the depth search needs.
     - 'R<packed blocks>': the blocks a BlockRemoved event evicted: the rank's entry is deleted from
       their owner lists in both generations (a list left empty is deleted). vLLM evicts a chain's
       tail first (finished requests free their blocks in reverse), so removals keep the closure.
  Replaying a batch is harmless: a store of blocks held already writes nothing, a removal of blocks
  not held deletes nothing, and a clear replayed after later stores is healed by the stores replayed
  after it.

  KEYS[1]  <ns>:{<tag>}:forgotten    HASH backend id -> '<ms forgotten>[|<retention ms>]'
  KEYS[2]  <ns>:{<tag>}:owners:new   HASH block hash -> owner list, current generation
  KEYS[3]  <ns>:{<tag>}:owners:old   HASH block hash -> owner list, previous generation
  KEYS[4]  <ns>:{<tag>}:generation   STRING ms the current generation started
  ARGV[1]  rank id: the backend id, or '<backend id>@<rank>' for a rank of a data-parallel backend
  ARGV[2]  now, ms since the Unix epoch
  ARGV[3]  block idle TTL, ms (0 = blocks never go idle)
  ARGV[4]  max blocks per pool (the owner index's cap, > 0)
  ARGV[5]  '1' = forget the rank's entries first (AllBlocksCleared, resync), '0' = not
  ARGV[6…] the ops, in event order (above); block hashes packed as keys.ts packBlockHashes packs them

  Returns { owner entries removed, then per 'S' op in order: its blocks the rank holds afterwards, or
  -1 when it does not hold the op's anchor }.
]]

--#include lib/batched.lua
--#include lib/owner-index.lua

local rankId = ARGV[1]
local now, idleTtl, cap = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local marker = '\1' .. rankId .. '\2'

if ARGV[5] == '1' then
  -- forget-backend.lua's mark (a learned retention is kept), one ms back: this batch's stores count.
  local previous = redis.call('HGET', KEYS[1], rankId)
  local bar = previous and string.find(previous, '|', 1, true)
  local mark = tostring(now - 1)
  redis.call('HSET', KEYS[1], rankId, bar and (mark .. string.sub(previous, bar)) or mark)
  if idleTtl > 0 and redis.call('PTTL', KEYS[1]) < 2 * idleTtl then redis.call('PEXPIRE', KEYS[1], 2 * idleTtl) end
end

local turned = rotateGenerations(KEYS[2], KEYS[3], KEYS[4], now, idleTtl, cap)
local thresholds = forgetThresholds({ rankId }, { redis.call('HGET', KEYS[1], rankId) }, now)
local forgot = thresholds.record[rankId]

-- The time of the rank's entry on `anchor` in `new` when it counts for recording, else nil.
local function anchorTime(anchor)
  local owners = redis.call('HGET', KEYS[2], anchor)
  local at = owners and string.find(owners, marker, 1, true)
  if not at then return nil end
  local recorded = tonumber(string.match(owners, '^%d+', at + #marker))
  if forgot ~= nil and recorded <= forgot then return nil end
  return recorded
end

-- Deletes the rank's entry from the owner lists of `fields` in `key`; returns how many it deleted.
local function removeEntries(key, fields)
  local removed = 0
  local find, sub = string.find, string.sub
  for first = 1, #fields, CHUNK do
    local last = math.min(first + CHUNK - 1, #fields)
    local values = redis.call('HMGET', key, unpack(fields, first, last))
    local rewrite, count, gone = {}, 0, {}
    for k = 1, #values do
      local value = values[k]
      local at = value and find(value, marker, 1, true)
      if at then
        local after = find(value, '\1', at + 1, true) or (#value + 1)
        local rest = sub(value, 1, at - 1) .. sub(value, after)
        removed = removed + 1
        if rest == '' then
          gone[#gone + 1] = fields[first + k - 1]
        else
          rewrite[count + 1], rewrite[count + 2] = fields[first + k - 1], rest
          count = count + 2
        end
      end
    end
    if count > 0 then redis.call('HSET', key, unpack(rewrite, 1, count)) end
    if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
  end
  return removed
end

local results = { 0 }
local added = 0
for a = 6, #ARGV do
  local op = ARGV[a]
  local kind = string.sub(op, 1, 1)
  if kind == 'R' then
    local packed = string.sub(op, 2)
    local read, fields = packedBlockReader(packed), {}
    for i = 1, packedBlockCount(packed) do fields[i] = read(i) end
    results[1] = results[1] + removeEntries(KEYS[2], fields) + removeEntries(KEYS[3], fields)
  elseif kind == 'S' then
    local colon = string.find(op, ':', 2, true)
    local anchor, packed = string.sub(op, 2, colon - 1), string.sub(op, colon + 1)
    local count = packedBlockCount(packed)
    local ceiling = nil
    local held = true
    if anchor ~= '' then
      ceiling = anchorTime(anchor)
      held = ceiling ~= nil
    end
    if not held then
      results[#results + 1] = -1
    elseif count == 0 then
      results[#results + 1] = 0
    else
      local index = newOwnerIndex(KEYS[2], KEYS[3], count, packedBlockReader(packed), thresholds)
      local wrote, to = index.record(rankId, now, count, ceiling)
      added = added + wrote
      results[#results + 1] = to
    end
  else
    error('apply-kv-events: unknown op ' .. string.sub(op, 1, 1))
  end
end
if added > 0 or turned then keepIndexAlive(KEYS[2], KEYS[3], KEYS[4], idleTtl, turned) end
return results
