-- Shared helpers, inlined by embed-lua.ts wherever a script has an include line for this file
-- (after lib/batched.lua, whose helpers they use).
--
-- The owner index: which backends of a pool hold which prefix blocks. Two generations of one HASH each,
-- `owners:new` and `owners:old`, field = block hash (decimal), value = the block's owners in that
-- generation, each entry "\1<id>\2<ms recorded>", newest first (ids never contain control characters: they travel
-- in HTTP headers), so one C-level pattern match lists a block's owners. Recording writes into `new`;
-- when `new` is one idle TTL old or holds half the pool's cap, it becomes `old` and the previous `old`
-- is dropped whole (UNLINK: freed off the main thread). A block therefore stays known while it is used
-- at least once per idle TTL, is forgotten between one and two idle TTLs after its last use, and the
-- index holds at most about the cap (a turn is checked once per call, before its up to
-- RECORD_BLOCKS_PER_CALL new blocks): LRU at the granularity of a generation, O(1) eviction.
--
-- Invariant (prefix closure): recording for backend b always covers blocks 1..N of the request's
-- chain in `new`, so b's blocks in `new` are prefix-closed per chain, `old` was a `new`, and dropping a
-- generation drops whole sets. Hence "b holds block i" is monotone in i and the depth is found by
-- binary search: O(log N) block reads per distinct depth (memoized), never backends x blocks.
--
-- An entry counts only if it was recorded after its backend was last forgotten (forget-backend.lua)
-- and, once the backend's retention has been learned (learn.lua: the engine reported a prefix gone
-- that the index still held), only while it is younger than that retention: the engine's LRU drops
-- what was used less recently, so an entry older than the age at which entries were seen gone is
-- believed gone too. The `forgotten` field of a backend is "<mark ms>" or "<mark ms>|<retention ms>".
--
-- Recording refreshes an entry once it is older than half the retention (it is rewritten with the
-- current time: the backend used it now), so a chain in steady use never ages out between uses; a
-- block is never recorded newer than the block before it (index.record), so a backend's times never
-- increase along a chain and ageing hides a suffix of it: prefix closure holds for what is visible.

-- The time at or before which a backend's entries no longer count, from its `forgotten` field (nil:
-- all count). forRecording: the stricter threshold recording refreshes below (half the retention).
local function forgetThreshold(value, now, forRecording)
  if not value then return nil end
  local bar = string.find(value, '|', 1, true)
  if not bar then return tonumber(value) end
  local mark, retention = tonumber(string.sub(value, 1, bar - 1)), tonumber(string.sub(value, bar + 1))
  local aged = now - (forRecording and math.floor(retention / 2) or retention)
  return aged > mark and aged or mark
end

-- Both thresholds for each of `ids` from their `forgotten` fields (`values`, in the order of `ids`):
-- { lookup = { [id] = ms }, record = { [id] = ms } }.
local function forgetThresholds(ids, values, now)
  local lookup, record = {}, {}
  for j = 1, #ids do
    lookup[ids[j]] = forgetThreshold(values[j], now, false)
    record[ids[j]] = forgetThreshold(values[j], now, true)
  end
  return { lookup = lookup, record = record }
end

-- A reader of one request's chain over both generations. blockAt(i) = the i-th block hash (1-based),
-- thresholds = forgetThresholds(…): entries at or before `lookup[id]` do not count for depths, and
-- those at or before `record[id]` are rewritten by record. Reads are batched (HMGET) and each field is
-- read at most once per generation.
--
-- Depth search, for all candidates at once: read a set of start positions (one HMGET per generation): a
-- ladder of ~LADDER_RUNGS evenly spaced blocks, or, when the caller names its message boundaries (hints)
-- and no shortlist read the ladder, block 1, the hints and the last block (searchPositions). Where two
-- neighbouring positions' owner lists differ, find the blocks where they change by bisection (one HMGET
-- per generation a round, for all such stretches at once). That splits the chain into runs over which
-- every backend's holding is constant (prefix closure makes holding monotone), so each candidate's depth
-- is a binary search over the runs, usually two or three: the shared system prompt, a conversation's
-- earlier turns, its latest, the unrecorded tail. Exact whatever the start positions; the rounds are
-- ~log2 of the longest stretch between two differing ones (from the ladder, log2(blocks / LADDER_RUNGS);
-- from hints, none when they stand at the change points, more when one is far from any hint), and a few
-- string finds per candidate (issue 28: searching each candidate over the blocks cost ~8 finds each;
-- reading the stretches between differing rungs whole, with 16 rungs, read ~30 blocks of a 132-block
-- conversation where the ladder reads ~17 and the hints ~12: 8 rungs measured best of 4, 6, 8, 16 and
-- 32 with bisection).
local LADDER_RUNGS = 8
-- Bytes of an owner list's head parsed per owner wanted (index.deepestOwners): an entry is \1<id>\2<13-digit ms>.
local OWNER_HEAD_BYTES = 96

-- hints (optional): block positions (1-based, within 1..blockCount) where the caller expects owner lists
-- to change (RoutingRequest.boundaryBlocks: message boundaries), read first (with the ladder, or in its
-- place: searchPositions); a change point among them needs no round of bisection. They change what is
-- read, never a depth, nor the owners deepestOwners finds (it walks the rungs alone).
local function newOwnerIndex(newKey, oldKey, blockCount, blockAt, thresholds, hints)
  local raw = { [newKey] = {}, [oldKey] = {} }
  local index = {}

  -- Reads the fields at `positions` of `key` not read yet (one HMGET); false = no field. Counts kept in
  -- locals, not `#t` (a length is a search in Lua 5.1): this runs for every block a decision reads.
  local function read(key, positions)
    local known = raw[key]
    local missing, fields, count = {}, {}, 0
    for k = 1, #positions do
      local i = positions[k]
      if known[i] == nil then
        count = count + 1
        missing[count], fields[count] = i, blockAt(i)
      end
    end
    if count > 0 then
      local values = hmgetAll(key, fields)
      for k = 1, count do known[missing[k]] = values[k] end
    end
  end

  -- The ladder's positions, ascending: the rungs 1, 1 + step, ..., the last block (blockCount > 0), and
  -- the hints among them (what is read first); and the rungs alone (what deepestOwners walks, so that a
  -- shortlist does not depend on hints).
  local rungs, evenRungs
  local function ladder()
    if rungs then return rungs, evenRungs end
    local step = math.max(1, math.ceil(blockCount / LADDER_RUNGS))
    local count = 0
    evenRungs = {}
    for i = 1, blockCount, step do
      count = count + 1
      evenRungs[count] = i
    end
    if evenRungs[count] ~= blockCount then
      count = count + 1
      evenRungs[count] = blockCount
    end
    rungs = evenRungs
    if hints and #hints > 0 then
      -- A hint on a rung (a multiple of the step past 1, or the last block) or twice is read once.
      local taken = {}
      rungs = {}
      for k = 1, count do
        rungs[k] = evenRungs[k]
        taken[evenRungs[k]] = true
      end
      for k = 1, #hints do
        local i = hints[k]
        if not taken[i] then
          count = count + 1
          rungs[count], taken[i] = i, true
        end
      end
      table.sort(rungs)
    end
    return rungs, evenRungs
  end

  -- Where the depth search starts: block 1, the hints and the last block, when hints came and deepestOwners has not
  -- read the ladder (a decision every member takes part in); else the ladder. Holding is monotone along the chain
  -- (prefix closure), so two positions with the same owner lists have the same owners at every block between them,
  -- and the search bisects only between positions whose lists differ: any partition finds every change point, and
  -- one at the message boundaries the hints name takes no round. The even rungs between hints found none there
  -- (issue 28: 6 of a conversation's ~18 blocks read, at 16 backends).
  local ladderRead, searchStart = false, nil
  local function searchPositions()
    if searchStart then return searchStart end
    if not hints or #hints == 0 or ladderRead then
      searchStart = ladder()
      return searchStart
    end
    local positions, taken = { 1 }, { [1] = true }
    for k = 1, #hints do
      local i = hints[k]
      if not taken[i] then
        positions[#positions + 1], taken[i] = i, true
      end
    end
    if not taken[blockCount] then positions[#positions + 1] = blockCount end
    table.sort(positions)
    searchStart = positions
    return positions
  end

  -- For each of `ids`, in their order: the largest d such that it holds blocks 1..d, in `new` or, when
  -- withOld, in either generation, counting the entries recorded after forgottenAt[id]; and when its
  -- entry on block d was recorded, the decimal string stored (nil at depth 0). Two arrays.
  local function deepest(ids, withOld, forgottenAt)
    local depths, recordedAt = {}, {}
    if blockCount == 0 then
      for k = 1, #ids do depths[k] = 0 end
      return depths, recordedAt
    end
    local newValues, oldValues = raw[newKey], raw[oldKey]
    local find, match = string.find, string.match
    local rungs = searchPositions()
    read(newKey, rungs)
    if withOld then
      -- A backend that does not hold block 1 in the previous generation holds nothing there (prefix
      -- closure): when none of `ids` does, that generation is read no further (block 1 alone first:
      -- one command more when it is needed, the rest of its ladder saved when not).
      read(oldKey, { 1 })
      local first, any = oldValues[1], false
      if first then
        for k = 1, #ids do
          local marker, forgot = '\1' .. ids[k] .. '\2', forgottenAt[ids[k]]
          local at = find(first, marker, 1, true)
          if at and (forgot == nil or tonumber(match(first, '^%d+', at + #marker)) > forgot) then
            any = true
            break
          end
        end
      end
      withOld = any
      if withOld then read(oldKey, rungs) end
    end

    -- 1. The runs: stretches of the chain over which every backend's holding is constant, found as the
    -- blocks where the owner lists (in the generations searched) change. Holding is monotone along the
    -- chain (prefix closure), so two blocks with the same lists hold the same owners, and so does every
    -- block between them. Between two rungs whose lists differ, the change points are found by
    -- bisection: each round reads the middle block of every stretch still open (one HMGET per generation
    -- for all of them) and keeps the halves whose ends differ, until each is two neighbouring blocks, a
    -- change point. A stretch of g blocks takes ~log2(g) rounds of one block, where reading it whole took
    -- g blocks (issue 28: the blocks read, their names and their tables were most of a decision's depth
    -- search). ends = each run's last block, ascending.
    local function same(i, j)
      return newValues[i] == newValues[j] and (not withOld or oldValues[i] == oldValues[j])
    end
    local lows, highs, open = {}, {}, 0
    for r = 1, #rungs - 1 do
      if not same(rungs[r], rungs[r + 1]) then
        open = open + 1
        lows[open], highs[open] = rungs[r], rungs[r + 1]
      end
    end
    local ends, endCount = {}, 0
    while open > 0 do
      local middles, splitting = {}, 0
      for k = 1, open do
        local low, high = lows[k], highs[k]
        if high == low + 1 then
          endCount = endCount + 1
          ends[endCount] = low
        else
          splitting = splitting + 1
          lows[splitting], highs[splitting] = low, high
          middles[splitting] = low + (high - low - (high - low) % 2) / 2
        end
      end
      open = 0
      if splitting > 0 then
        read(newKey, middles)
        if withOld then read(oldKey, middles) end
        -- Both halves of a stretch can hold change points; a half whose ends are the same holds none.
        local nextLows, nextHighs = {}, {}
        for k = 1, splitting do
          local low, middle, high = lows[k], middles[k], highs[k]
          if not same(low, middle) then
            open = open + 1
            nextLows[open], nextHighs[open] = low, middle
          end
          if not same(middle, high) then
            open = open + 1
            nextLows[open], nextHighs[open] = middle, high
          end
        end
        lows, highs = nextLows, nextHighs
      end
    end
    table.sort(ends)
    endCount = endCount + 1
    ends[endCount] = blockCount

    -- 2. Each id's depth: the end of the last run it holds, by binary search over the runs (typically
    -- a handful: the shared system prompt, a conversation's earlier turns, its latest, the unrecorded tail).
    -- A probe finds the id's entry "\1<id>\2" in the run end's owner list (new, then old), and it holds
    -- the run if the entry counts (recorded after the id's forget threshold); no decoding, inline: this
    -- runs (candidates x log(runs)) times per decision.
    for k = 1, #ids do
      local id = ids[k]
      local marker, forgot = '\1' .. id .. '\2', forgottenAt[id]
      local low, high, heldValue, heldAt = 0, #ends, nil, nil
      while low < high do
        -- floor((low + high + 1) / 2) without a call: this runs per candidate and probe.
        local middle = low + high + 1
        middle = (middle - middle % 2) / 2
        local i = ends[middle]
        local value = newValues[i]
        local at = value and find(value, marker, 1, true)
        if not at and withOld then
          value = oldValues[i]
          at = value and find(value, marker, 1, true)
        end
        if at and forgot ~= nil and tonumber(match(value, '^%d+', at + #marker)) <= forgot then at = nil end
        if at then
          low, heldValue, heldAt = middle, value, at
        else
          high = middle - 1
        end
      end
      depths[k] = low == 0 and 0 or ends[low]
      if heldValue then recordedAt[k] = match(heldValue, '^%d+', heldAt + #marker) end
    end
    return depths, recordedAt
  end

  -- Up to `limit` distinct backends with entries on the chain's deepest recorded blocks that `accept`
  -- takes (the caller's candidates: a removed or ineligible backend's entries must not crowd out live
  -- owners), for a decision's shortlist (route.lua): the ladder's rungs from the deepest down, in each
  -- the entries of `new` then `old`, the most recently recorded first (recording prepends). Entries are
  -- not judged here (forget marks, retention): index.depths does that for whoever is picked. Bounded
  -- whatever the pool's size: the ladder is read once (depths reuses it), and of each owner list only
  -- its first `limit` × OWNER_HEAD_BYTES bytes are parsed (an entry cut by that is skipped).
  -- accept(batch) judges ids in batches (one HMGET for all, not a call each: ~7k instructions an owner,
  -- issue 28) and returns a value per id, false for one not taken: a batch holds as many new ids as are
  -- still wanted, so the owners taken are the first `limit` acceptable ones in order, as one by one.
  function index.deepestOwners(limit, accept)
    local owners, seen, batch = {}, {}, {}
    if blockCount == 0 or limit <= 0 then return owners end
    -- Judges the batch; true once `limit` owners are taken.
    local function judge()
      local verdicts = accept(batch)
      for k = 1, #batch do
        if verdicts[k] and #owners < limit then owners[#owners + 1] = batch[k] end
      end
      batch = {}
      return #owners >= limit
    end
    local all, rungs = ladder()
    ladderRead = true
    read(newKey, all)
    -- The previous generation holds nothing of a chain whose block 1 it does not hold (prefix closure):
    -- its ladder is read only when it does.
    read(oldKey, { 1 })
    local keys = { newKey }
    if raw[oldKey][1] then
      read(oldKey, all)
      keys[2] = oldKey
    end
    local headBytes = limit * OWNER_HEAD_BYTES
    -- The list last parsed in each generation: a rung whose list is the same (most of a conversation's
    -- rungs) has no owner the deeper one did not have.
    local parsed = {}
    for r = #rungs, 1, -1 do
      for _, key in ipairs(keys) do
        local value = raw[key][rungs[r]]
        if value and value ~= parsed[key] then
          parsed[key] = value
          local head = #value > headBytes and string.sub(value, 1, headBytes) or value
          for id in string.gmatch(head, '\1([^\1\2]*)\2') do
            if not seen[id] then
              seen[id] = true
              batch[#batch + 1] = id
              if #owners + #batch >= limit and judge() then return owners end
            end
          end
        end
      end
    end
    if #batch > 0 then judge() end
    return owners
  end

  -- Leading blocks of the chain each of `ids` holds, in either generation, and when each one's
  -- deepest held block was recorded (ms, the decimal string stored, not converted: the caller only
  -- passes it on; nil at depth 0): two arrays in the order of `ids`. Times never increase along a chain
  -- (index.record), so that is the oldest entry of the matched prefix: the first an LRU engine evicts,
  -- whose age the router's learn stage takes as eviction evidence (learn.lua), read here because the
  -- request's own recording may rewrite it later. The search finds it: its last probe that held.
  function index.depths(ids)
    return deepest(ids, true, thresholds.lookup)
  end

  -- Records that backend `id` holds the chain: writes `now` into `new` for the blocks past its depth
  -- there, at most `maxNew` of them (per CHUNK blocks, one HMGET to keep the other owners of those
  -- blocks, one HSET), so the backend holds blocks 1..`to` there afterwards: a prefix, as the
  -- invariant wants; the caller records the rest in further calls. Returns the number of fields the
  -- HSETs added to `new`, and `to` (= blockCount once the whole chain is held).
  --
  -- The blocks written get the time of the block before them when that is older than `now` (the
  -- kept block `from - 1`, or `ceiling` for the chain's first block: the anchor's time when a longer
  -- chain is recorded in parts), so a backend's times never increase along a chain: ageing by time
  -- then hides a suffix of every chain, never a middle, and prefix closure holds for what lookups see.
  -- (A block is reachable only while the blocks before it are, so it ages with them.)
  function index.record(id, now, maxNew, ceiling)
    local from = 1 + deepest({ id }, false, thresholds.record)[1]
    if from > blockCount then return 0, blockCount end
    local to = math.min(blockCount, from + maxNew - 1)
    local marker = '\1' .. id .. '\2'
    local stamp = now
    local before = ceiling
    if from > 1 then
      read(newKey, { from - 1 })
      local value = raw[newKey][from - 1]
      local at = value and string.find(value, marker, 1, true)
      before = at and tonumber(string.match(value, '^%d+', at + #marker)) or nil
    end
    if before ~= nil and before < stamp then stamp = before end
    local entry = marker .. stamp
    local added = 0
    local find, sub = string.find, string.sub
    for first = from, to, CHUNK do
      local last = math.min(first + CHUNK - 1, to)
      local fields, count = {}, 0
      for i = first, last do
        count = count + 1
        fields[count] = blockAt(i)
      end
      local current = redis.call('HMGET', newKey, unpack(fields))
      local pairsToWrite = {}
      for k = 1, count do
        local value = current[k]
        if value then
          -- An entry from before a forget (or aged past half the retention) is replaced, not duplicated.
          local at = find(value, marker, 1, true)
          if at then
            local after = find(value, '\1', at + 1, true) or (#value + 1)
            value = sub(value, 1, at - 1) .. sub(value, after)
          end
          -- Prepended: the newest entries come first, where deepestOwners reads and where a search
          -- for a recently recorded owner (a conversation's, a shortlist's) stops soonest; a list
          -- every backend is on (a shared system prompt's block) is scanned ~half as far on average.
          value = entry .. value
        else
          value = entry
        end
        pairsToWrite[2 * k - 1], pairsToWrite[2 * k] = fields[k], value
      end
      added = added + redis.call('HSET', newKey, unpack(pairsToWrite))
    end
    return added, to
  end

  return index
end

-- Starts a new generation when `new` is one idle TTL old (idleTtl > 0) or holds half the cap (the
-- current generation's start, ms, is the value of generationKey). Run before recording. Returns true
-- when the generations turned.
local function rotateGenerations(newKey, oldKey, generationKey, now, idleTtl, cap)
  local started = tonumber(redis.call('GET', generationKey))
  if started == nil then
    redis.call('SET', generationKey, now)
    return false
  end
  if (idleTtl > 0 and now - started >= idleTtl) or redis.call('HLEN', newKey) >= math.max(1, math.floor(cap / 2)) then
    redis.call('UNLINK', oldKey)
    if redis.call('EXISTS', newKey) == 1 then redis.call('RENAME', newKey, oldKey) end
    redis.call('SET', generationKey, now)
    return true
  end
  return false
end

-- After recording: the index keys live two idle TTLs after the last recording (never with 0), within
-- one idle TTL: they are extended (all three) only when the generation key has less than one idle TTL
-- left, so a recording usually costs one PTTL here. `force` after a turn (the new `new` has no TTL).
local function keepIndexAlive(newKey, oldKey, generationKey, idleTtl, force)
  if idleTtl <= 0 then return end
  if not force and redis.call('PTTL', generationKey) >= idleTtl then return end
  for _, key in ipairs({ newKey, oldKey, generationKey }) do
    redis.call('PEXPIRE', key, 2 * idleTtl)
  end
end

-- Records `backend` as holding the chain `packedBlocks` because the request's first output came
-- (prefill-done.lua for a stream, release.lua for a non-streaming response): a new generation if due,
-- only the blocks it does not hold yet in the current one, at most `maxNew` of them; the caller records
-- the rest (record-ownership.lua). Returns the leading blocks it now holds there (0 without blocks).
local function recordHeldChain(forgottenKey, newKey, oldKey, generationKey, backend, now, idleTtl, cap, packedBlocks, maxNew)
  local blockCount = packedBlockCount(packedBlocks)
  if blockCount == 0 then return 0 end
  local turned = rotateGenerations(newKey, oldKey, generationKey, now, idleTtl, cap)
  local index = newOwnerIndex(newKey, oldKey, blockCount, packedBlockReader(packedBlocks),
    forgetThresholds({ backend }, { redis.call('HGET', forgottenKey, backend) }, now))
  local added, recordedTo = index.record(backend, now, maxNew)
  if added > 0 or turned then keepIndexAlive(newKey, oldKey, generationKey, idleTtl, turned) end
  return recordedTo
end
