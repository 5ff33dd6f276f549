-- Shared helpers, inlined by embed-lua.ts wherever a script has an include line for this file
-- (after lib/batched.lua, whose helpers they use).
--
-- A pool's member set and its engines' figures, as route.lua reads them (src/pool-members.ts writes
-- the arguments). A member set is one HASH per version: 'n' = the count, '#<position>' = '<id>\t<weight>'
-- (position 1-based, configuration order), '@<id>' = its position; a version is a digest of the set,
-- so every replica with the same eligible backends uses the same key, and a set no one uses expires.

-- Stores the member set `records` ('<id>\t<weight>\n' per member) at `key`, replacing it, for `ttl` ms.
local function storeMembers(key, records, ttl)
  redis.call('DEL', key)
  local writer, position = chunkedHset(key), 0
  for id, weight in string.gmatch(records, '([^\t\n]*)\t([^\n]*)\n') do
    position = position + 1
    writer.add('#' .. position, id .. '\t' .. weight)
    writer.add('@' .. id, position)
  end
  writer.add('n', position)
  writer.flush()
  redis.call('PEXPIRE', key, ttl)
end

-- The members at `positions` (one HMGET): their ids and weights, in order.
local function membersAt(key, positions)
  local fields = {}
  for k = 1, #positions do fields[k] = '#' .. positions[k] end
  local records = hmgetAll(key, fields)
  local ids, weights = {}, {}
  local find, sub = string.find, string.sub
  for k = 1, #positions do
    local record = records[k]
    local tab = find(record, '\t', 1, true)
    ids[k], weights[k] = sub(record, 1, tab - 1), numberOf[sub(record, tab + 1)]
  end
  return ids, weights
end

-- Stores engine figures: '<id>\t<field>\n' per backend (engineFigures has the field), one HSET per CHUNK.
local function storeEngineFigures(key, figures)
  local writer = chunkedHset(key)
  for id, value in string.gmatch(figures, '([^\t\n]*)\t([^\n]*)\n') do writer.add(id, value) end
  writer.flush()
end

-- An engine's figures from its field (false = unknown): waiting, free KV tokens (-1 = no limit known).
-- The field is '<waiting> <free KV tokens + 1>' in base 36 (pool-members.ts), which tonumber reads
-- with strtoul, at ~40 % of a decimal's strtod.
local function engineFigures(value)
  if not value then return 0, -1 end
  local waiting, free = string.match(value, '^(%w+) (%w+)$')
  return tonumber(waiting, 36), tonumber(free, 36) - 1
end
