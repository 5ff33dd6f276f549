-- Shared helpers, inlined by embed-lua.ts wherever a script has an include line for this file.
--
-- The owner index: which backends of a pool hold which prefix blocks. Two generations of one HASH each,
-- `owners:new` and `owners:old`, field = block hash (decimal), value = the block's owners in that
-- generation, each entry "\1<id>\2<ms recorded>" (ids never contain control characters: they travel
-- in HTTP headers), so one C-level pattern match lists a block's owners. Recording writes into `new`;
-- when `new` is one idle TTL old or holds half the pool's cap, it becomes `old` and the previous `old`
-- is dropped whole (UNLINK: freed off the main thread). A block therefore stays known while it is used
-- at least once per idle TTL, is forgotten between one and two idle TTLs after its last use, and the
-- index never holds more than the cap: LRU at the granularity of a generation, O(1) eviction.
--
-- Invariant (prefix closure): recording for backend b always covers blocks 1..N of the request's
-- chain in `new`, so b's blocks in `new` are prefix-closed per chain, `old` was a `new`, and dropping a
-- generation drops whole sets. Hence "b holds block i" is monotone in i and the depth is found by
-- binary search: O(log N) block reads per distinct depth (memoized), never backends x blocks.
--
-- An entry counts only if it was recorded after its backend was last forgotten (forget-backend.lua).

-- { [id] = ms recorded (string) } of an encoded owner list (false = no field).
local function decodeOwners(value)
  local owners = {}
  if value then
    for id, recorded in string.gmatch(value, '\1([^\2]*)\2(%d+)') do owners[id] = recorded end
  end
  return owners
end

-- A reader of one request's chain over both generations. blockAt(i) = the i-th block hash (1-based),
-- forgottenAt = { [id] = ms forgotten } (absent = never). Each field is read and decoded at most once,
-- the previous generation's only when the current one does not answer.
local function newOwnerIndex(newKey, oldKey, blockCount, blockAt, forgottenAt)
  local inNew, inOld = {}, {}
  local index = {}

  local function ownersNew(i)
    local owners = inNew[i]
    if owners == nil then
      owners = decodeOwners(redis.call('HGET', newKey, blockAt(i)))
      inNew[i] = owners
    end
    return owners
  end

  local function ownersOld(i)
    local owners = inOld[i]
    if owners == nil then
      owners = decodeOwners(redis.call('HGET', oldKey, blockAt(i)))
      inOld[i] = owners
    end
    return owners
  end

  local function counts(owners, id)
    local recorded = owners[id]
    if recorded == nil then return false end
    local forgot = forgottenAt[id]
    return forgot == nil or tonumber(recorded) > forgot
  end

  -- The ids of `ids` that hold block i (in `new`, or in either generation when bothGenerations).
  local function split(i, ids, bothGenerations)
    local yes, no = {}, {}
    local owners = ownersNew(i)
    local old = nil
    for _, id in ipairs(ids) do
      local held = counts(owners, id)
      if not held and bothGenerations then
        old = old or ownersOld(i)
        held = counts(old, id)
      end
      if held then yes[#yes + 1] = id else no[#no + 1] = id end
    end
    return yes, no
  end

  -- Depth of every id of `ids` (the largest d such that it holds blocks 1..d), as { [id] = d }: one
  -- binary search for all of them, splitting the ids at each probe, so ids of the same depth share
  -- every read.
  local function deepest(ids, bothGenerations)
    local depths = {}
    if blockCount == 0 then
      for _, id in ipairs(ids) do depths[id] = 0 end
      return depths
    end
    local holding, none = split(1, ids, bothGenerations)
    for _, id in ipairs(none) do depths[id] = 0 end
    -- Each task: ids that hold block `low`, whose depth lies in [low, high].
    local tasks = { { 1, blockCount, holding } }
    while #tasks > 0 do
      local task = table.remove(tasks)
      local low, high, members = task[1], task[2], task[3]
      if #members > 0 then
        if low == high then
          for _, id in ipairs(members) do depths[id] = low end
        else
          local middle = math.floor((low + high + 1) / 2)
          local yes, no = split(middle, members, bothGenerations)
          tasks[#tasks + 1] = { middle, high, yes }
          tasks[#tasks + 1] = { low, middle - 1, no }
        end
      end
    end
    return depths
  end

  -- Leading blocks of the chain each of `ids` holds, in either generation: { [id] = depth }.
  function index.depths(ids)
    return deepest(ids, true)
  end

  -- Records that backend `id` holds the whole chain: writes `now` into `new` for the blocks past its
  -- depth there (one HMGET to keep the other owners of those blocks, one HSET per 500 blocks).
  -- Returns the number of blocks written.
  function index.record(id, now)
    local from = 1 + deepest({ id }, false)[id]
    if from > blockCount then return 0 end
    local marker = '\1' .. id .. '\2'
    local entry = marker .. now
    for first = from, blockCount, 500 do
      local last = math.min(first + 499, blockCount)
      local fields = {}
      for i = first, last do fields[#fields + 1] = blockAt(i) end
      local current = redis.call('HMGET', newKey, unpack(fields))
      local pairsToWrite = {}
      for k = 1, #fields do
        local value = current[k] or ''
        -- An entry from before a forget is replaced, not duplicated.
        local at = string.find(value, marker, 1, true)
        if at then
          local after = string.find(value, '\1', at + 1, true) or (#value + 1)
          value = string.sub(value, 1, at - 1) .. string.sub(value, after)
        end
        pairsToWrite[#pairsToWrite + 1] = fields[k]
        pairsToWrite[#pairsToWrite + 1] = value .. entry
      end
      redis.call('HSET', newKey, unpack(pairsToWrite))
    end
    return blockCount - from + 1
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

-- After recording: the index keys expire two idle TTLs after the last recording (never with 0).
local function keepIndexAlive(newKey, oldKey, generationKey, idleTtl)
  if idleTtl <= 0 then return end
  for _, key in ipairs({ newKey, oldKey, generationKey }) do
    redis.call('PEXPIRE', key, 2 * idleTtl)
  end
end
