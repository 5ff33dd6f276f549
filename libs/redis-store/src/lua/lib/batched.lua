-- Shared helpers, inlined by embed-lua.ts wherever a script has an include line for this file.
--
-- Bounded work per argument, at any number of blocks or backends. Block hashes arrive packed in one
-- argument, BLOCK_WIDTH bytes each (the decimal hash right-aligned in 16 characters, then ','; built
-- by keys.ts `packBlockHashes`), and are read in place by position, so a depth search reads only the
-- blocks it looks at. Multi-field commands go out CHUNK fields at a time, so no `unpack` puts more
-- than 2 * CHUNK values on Lua's C stack (LUAI_MAXCSTACK is 8000: "too many results to unpack").
local BLOCK_WIDTH = 17
local CHUNK = 200

-- The number of blocks in a packed argument (any other length is a caller's bug).
local function packedBlockCount(packed)
  local count = #packed / BLOCK_WIDTH
  if count ~= math.floor(count) then
    error('packed block hashes: ' .. #packed .. ' bytes is not a multiple of ' .. BLOCK_WIDTH)
  end
  return count
end

-- blockAt(i): the i-th block hash (1-based) of a packed argument, as the decimal string the owner
-- index keys its fields by. Most 53-bit hashes have 16 digits and fill their slot: one string.sub
-- (a pattern match, for the padded rest, costs several times more; recording reads every block).
local function packedBlockReader(packed)
  local sub, byte, match = string.sub, string.byte, string.match
  return function(i)
    local at = (i - 1) * BLOCK_WIDTH + 1
    if byte(packed, at) ~= 32 then return sub(packed, at, at + BLOCK_WIDTH - 2) end
    return match(packed, '%d+', at)
  end
end

-- HMGET of any number of fields, CHUNK at a time: the values in order (false = no such field).
local function hmgetAll(key, fields)
  local count = #fields
  if count <= CHUNK then return redis.call('HMGET', key, unpack(fields)) end
  local values = {}
  for first = 1, count, CHUNK do
    local part = redis.call('HMGET', key, unpack(fields, first, math.min(first + CHUNK - 1, count)))
    for k = 1, #part do values[first + k - 1] = part[k] end
  end
  return values
end

-- Decimal strings as numbers, each distinct string converted once: tonumber goes through strtod, ~1.7k
-- instructions a call in Redis's Lua, where a hit in the memo costs ~0.25k (callgrind, issue 28), and a
-- decision's counts and weights repeat ('1', '4'). Hot loops read `knownNumbers[text] or numberOf(text)`
-- (a miss, or false for no field, calls; numberOf(false) is nil). A script run as a Redis Function (a
-- '--#body' line: src/scripts.ts) keeps the memo from call to call, so it is emptied whenever it holds
-- NUMBER_MEMO_LIMIT strings: bounded memory, and conversions shared across calls. (A function library
-- has no setmetatable, so this is a table and a function, not a table with __index.)
local NUMBER_MEMO_LIMIT = 4096
local knownNumbers, knownCount = {}, 0
local function numberOf(text)
  if not text then return nil end
  local value = knownNumbers[text]
  if value ~= nil then return value end
  value = tonumber(text)
  if knownCount >= NUMBER_MEMO_LIMIT then
    knownNumbers, knownCount = {}, 0
  end
  knownNumbers[text] = value
  knownCount = knownCount + 1
  return value
end

-- HSET of any number of pairs, CHUNK pairs a call: writer.add(field, value) as they come, then writer.flush().
local function chunkedHset(key)
  local fields, count, writer = {}, 0, {}
  function writer.flush()
    if count > 0 then redis.call('HSET', key, unpack(fields, 1, count)) end
    count = 0
  end
  function writer.add(field, value)
    fields[count + 1], fields[count + 2] = field, value
    count = count + 2
    if count >= 2 * CHUNK then writer.flush() end
  end
  return writer
end
