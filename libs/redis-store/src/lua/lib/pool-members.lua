-- Shared helpers, inlined by embed-lua.ts wherever a script has an include line for this file
-- (after lib/batched.lua, whose helpers they use).
--
-- A pool's member set and its engines' figures, as route.lua reads them (src/pool-members.ts writes
-- the arguments). A member set is one HASH per version: 'n' = the count, '#<position>' = '<id>\t<weight>'
-- (position 1-based, configuration order), '@<id>' = its position, and the whole set for a decision
-- that every member takes part in: 'ids' = each id followed by '\n', configuration order, 'weights' = ''
-- when every weight is 1, else each weight followed by '\n' (one HMGET and a C-level find per member,
-- where a field per position costs a number turned into its name: ~3k instructions each, issue 28). A
-- version is a digest of the set, so every replica with the same eligible backends uses the same key,
-- and a set no one uses expires.

-- Stores the member set `records` ('<id>\t<weight>\n' per member) at `key`, replacing it, for `ttl` ms.
local function storeMembers(key, records, ttl)
  redis.call('DEL', key)
  local writer, position = chunkedHset(key), 0
  local ids, weights, uniform = {}, {}, true
  for id, weight in string.gmatch(records, '([^\t\n]*)\t([^\n]*)\n') do
    position = position + 1
    writer.add('#' .. position, id .. '\t' .. weight)
    writer.add('@' .. id, position)
    ids[position], weights[position] = id .. '\n', weight .. '\n'
    if weight ~= '1' then uniform = false end
  end
  writer.add('n', position)
  writer.add('ids', table.concat(ids))
  writer.add('weights', uniform and '' or table.concat(weights))
  writer.flush()
  redis.call('PEXPIRE', key, ttl)
end

-- The pieces of `text` that each end with a '\n', in order.
local function linesOf(text)
  local lines, count, at = {}, 0, 1
  local find, sub = string.find, string.sub
  while true do
    local newline = find(text, '\n', at, true)
    if not newline then return lines end
    count = count + 1
    lines[count] = sub(text, at, newline - 1)
    at = newline + 1
  end
end

-- What has been read of member sets, by key: the whole set (`ids`, `weights`) and members' records and
-- positions. A set's key names its version, a 53-bit digest of its members and weights (src/pool-members.ts),
-- so what a key held once it holds whenever it is there: a set stored again under it is the same set, in any
-- logical database (a router of another version, which might store another format, runs a library of its
-- own: a table of its own). Two sets of one pool with the same digest would be mixed up, as they already are
-- in Redis (same key). A Redis Function keeps this between calls, so a decision reads and parses its set, or a
-- member's record, or an id's position, only the first time (issue 28: −129k instructions a decision at
-- 1,024 backends for the records). Whether the set is still stored is checked on every call (HEXISTS of its
-- 'ids', or the caller's HGET of its count). At most KNOWN_SETS_LIMIT sets.
local KNOWN_SETS_LIMIT = 8
local knownSets, knownSetCount = {}, 0
local function knownSetAt(key)
  local known = knownSets[key]
  if not known then
    if knownSetCount >= KNOWN_SETS_LIMIT then knownSets, knownSetCount = {}, 0 end
    known = { id = {}, weight = {}, position = {} }
    knownSets[key] = known
    knownSetCount = knownSetCount + 1
  end
  return known
end

-- Every member of the set at `key`, in configuration order: their ids and weights, arrays the caller must
-- not change (they are shared with later calls); nil when no whole set is stored there (none, or one stored
-- before it had 'ids': the caller sends it again). One HEXISTS once the set was read, one HMGET before.
local function allMembers(key)
  local known = knownSetAt(key)
  if known.ids then
    if redis.call('HEXISTS', key, 'ids') == 0 then return nil end
    return known.ids, known.weights
  end
  local stored = redis.call('HMGET', key, 'ids', 'weights')
  local idsText, weightsText = stored[1], stored[2]
  if not idsText or not weightsText then return nil end
  local ids, weights = linesOf(idsText), nil
  if weightsText == '' then
    weights = {}
    for k = 1, #ids do weights[k] = 1 end
  else
    weights = linesOf(weightsText)
    for k = 1, #weights do weights[k] = knownNumbers[weights[k]] or numberOf(weights[k]) end
  end
  known.ids, known.weights = ids, weights
  return ids, weights
end

-- The members at the positions named `positionNames` (decimal strings, as the shortlist and the
-- '@<id>' fields give them; at most one HMGET, for those not read before): their ids and weights, in order.
local function membersAt(key, positionNames)
  local known = knownSetAt(key)
  local knownIds, knownWeights = known.id, known.weight
  local ids, weights, missing, fields, count = {}, {}, {}, {}, 0
  for k = 1, #positionNames do
    local name = positionNames[k]
    local id = knownIds[name]
    if id then
      ids[k], weights[k] = id, knownWeights[name]
    else
      count = count + 1
      missing[count], fields[count] = k, '#' .. name
    end
  end
  if count > 0 then
    local records = hmgetAll(key, fields)
    local find, sub = string.find, string.sub
    for m = 1, count do
      local k, record = missing[m], records[m]
      local tab = find(record, '\t', 1, true)
      local id, weight = sub(record, 1, tab - 1), numberOf(sub(record, tab + 1))
      local name = positionNames[k]
      ids[k], weights[k] = id, weight
      knownIds[name], knownWeights[name] = id, weight
    end
  end
  return ids, weights
end

-- The positions of `ids` in the set at `key`, as the decimal strings stored ('@<id>' fields; false for an
-- id that is not a member), in order; at most one HMGET, for those not read before.
local function positionNamesOf(key, ids)
  local knownPositions = knownSetAt(key).position
  local names, missing, fields, count = {}, {}, {}, 0
  for k = 1, #ids do
    local name = knownPositions[ids[k]]
    if name ~= nil then
      names[k] = name
    else
      count = count + 1
      missing[count], fields[count] = k, '@' .. ids[k]
    end
  end
  if count > 0 then
    local found = hmgetAll(key, fields)
    for m = 1, count do
      local k = missing[m]
      names[k] = found[m]
      knownPositions[ids[k]] = found[m]
    end
  end
  return names
end

-- Stores engine figures: '<id>\t<field>\n' per backend (the field: pool-members.ts engineFiguresField), one HSET per CHUNK.
local function storeEngineFigures(key, figures)
  local writer = chunkedHset(key)
  for id, value in string.gmatch(figures, '([^\t\n]*)\t([^\n]*)\n') do writer.add(id, value) end
  writer.flush()
end
