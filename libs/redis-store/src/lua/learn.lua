--[[
  learn: what responses told the routers, written into the pool's shared state in one step, so every
  replica routes on what any replica saw (the router's learn stage; at most one call per response,
  none when a response confirms the prediction and no calibration batch is due).

  1. Retention (ARGV[2] a backend, ARGV[5] an outcome): the engine's reported cached prefix against
     the index's prediction for one response.
     'over'  the engine held less than the index predicted: the deepest predicted block was gone
             (vLLM evicts LRU and frees a request's blocks tail-first, so it goes first). Its entry's
             age when the request was routed (ARGV[8] - ARGV[7]) is evidence that the backend's LRU
             drops entries of that age; the backend's retention moves towards it (first evidence:
             the age itself; then 0.7 · retention + 0.3 · age), bounded to [min evidence age, max
             retention]. The entry time comes from the routing call (route.lua / snapshot.lua), not
             from the index now: the request's own recording (at routing, or at its first output)
             has rewritten an entry older than half the retention since, and reading it here lost
             every evidence older than that (the retention could only ratchet down). Ignored when
             the age is below ARGV[9] (a race with a sibling's prefill is no eviction), the entry
             predates the backend's forget mark (a restart since), or there is none (ARGV[7] = -1).
             The chain is then recorded again as held (the engine computed it for this request), so
             the shorter retention does not hide it.
     'under' the engine held more and a retention is set: it grows by a quarter (the index hid
             entries the engine still had), bounded by ARGV[12].
     The retention is kept in the backend's `forgotten` field ('<mark>|<retention ms>',
     lib/owner-index.lua), which every lookup reads already: no extra read per decision.
  2. Calibration (ARGV[11] not ''): a replica's batch of cost-model samples merged into the pool's
     learned values: each value is the running mean of its samples up to CALIBRATION_WINDOW of them,
     then an exponentially weighted mean over about that many (a batch of n moves it by
     min(1, n / CALIBRATION_WINDOW) of the difference: a batch larger than the window replaces it).

  KEYS[1]  <ns>:{<tag>}:forgotten        HASH backend id -> '<ms forgotten>[|<retention ms>]'
  KEYS[2]  <ns>:{<tag>}:owners:new       HASH block hash -> owner list, current generation
  KEYS[3]  <ns>:{<tag>}:owners:old       HASH block hash -> owner list, previous generation
  KEYS[4]  <ns>:{<tag>}:generation       STRING ms the current generation started
  KEYS[5]  <ns>:{<tag>}:calibration      HASH name -> learned value, name..':n' -> samples merged
  ARGV[1]  now, ms since the Unix epoch
  ARGV[2]  backend id ('' = calibration only)
  ARGV[3]  block idle TTL, ms (0 = blocks never go idle)
  ARGV[4]  max blocks per pool (the owner index's cap, > 0)
  ARGV[5]  outcome: 'over' | 'under' | '' (none)
  ARGV[6]  the request's block hashes, shallowest first, packed (lib/batched.lua; '' = none)
  ARGV[7]  ms the backend's deepest predicted block was recorded, as the routing call read it (the
           oldest entry of the predicted prefix: times never increase along a chain); -1 = none
  ARGV[8]  ms the request was routed
  ARGV[9]  min evidence age, ms
  ARGV[10] at most this many new blocks are recorded (> 0)
  ARGV[11] calibration batch: '' or '<name>,<samples>,<sum>' triples joined by ';'
  ARGV[12] max retention, ms (> 0)

  Returns {retention ms of the backend after this call (-1: none, or no backend), leading blocks of the
  chain the backend holds after re-recording (0 when not re-recorded), then name, value, samples for
  every learned calibration value of the pool (value as a string: Lua numbers leave Redis as integers)}.
]]

--#include lib/batched.lua
--#include lib/owner-index.lua

local CALIBRATION_WINDOW = 200

local now = tonumber(ARGV[1])
local backendId = ARGV[2]
local outcome = ARGV[5]
local result = { -1, 0 }

if backendId ~= '' then
  local field = redis.call('HGET', KEYS[1], backendId)
  local mark, retention = 0, nil
  if field then
    local bar = string.find(field, '|', 1, true)
    mark = tonumber(bar and string.sub(field, 1, bar - 1) or field)
    retention = bar and tonumber(string.sub(field, bar + 1)) or nil
  end
  local minAge, maxRetention = tonumber(ARGV[9]), tonumber(ARGV[12])
  local learned = retention
  local packedBlocks = ARGV[6]
  local blockCount = packedBlockCount(packedBlocks)
  local blockAt = packedBlockReader(packedBlocks)

  if outcome == 'over' then
    local recordedAt = tonumber(ARGV[7])
    local age = tonumber(ARGV[8]) - recordedAt
    if recordedAt >= 0 and recordedAt > mark and age >= minAge then
      learned = retention and math.floor(0.7 * retention + 0.3 * age) or age
    end
  elseif outcome == 'under' and retention then
    learned = math.floor(retention * 1.25)
  end

  if learned then
    learned = math.max(minAge, math.min(maxRetention, learned))
    result[1] = learned
  end
  if learned and learned ~= retention then
    redis.call('HSET', KEYS[1], backendId, mark .. '|' .. learned)
    local idleTtl = tonumber(ARGV[3])
    if idleTtl > 0 and redis.call('PTTL', KEYS[1]) < 2 * idleTtl then redis.call('PEXPIRE', KEYS[1], 2 * idleTtl) end
    if outcome == 'over' and blockCount > 0 then
      local turned = rotateGenerations(KEYS[2], KEYS[3], KEYS[4], now, idleTtl, tonumber(ARGV[4]))
      local index = newOwnerIndex(KEYS[2], KEYS[3], blockCount, blockAt,
        forgetThresholds({ backendId }, { mark .. '|' .. learned }, now))
      local added, to = index.record(backendId, now, tonumber(ARGV[10]))
      result[2] = to
      if added > 0 or turned then keepIndexAlive(KEYS[2], KEYS[3], KEYS[4], idleTtl, turned) end
    end
  end
end

if ARGV[11] ~= '' then
  for name, samples, sum in string.gmatch(ARGV[11], '([%w]+),([%d]+),([-%d%.eE+]+)') do
    local n, total = tonumber(samples), tonumber(sum)
    if n > 0 then
      local mean = total / n
      local current = tonumber(redis.call('HGET', KEYS[5], name))
      local merged = tonumber(redis.call('HGET', KEYS[5], name .. ':n')) or 0
      local value = mean
      if current and merged > 0 then
        -- At most the whole step: a batch larger than the window replaces the value, never overshoots it.
        value = current + (mean - current) * math.min(1, n / math.min(merged + n, CALIBRATION_WINDOW))
      end
      redis.call('HSET', KEYS[5], name, string.format('%.6g', value), name .. ':n', merged + n)
    end
  end
  local idleTtl = tonumber(ARGV[3])
  if idleTtl > 0 then redis.call('PEXPIRE', KEYS[5], 2 * idleTtl) end
end

local values = redis.call('HGETALL', KEYS[5])
local byName = {}
for k = 1, #values, 2 do byName[values[k]] = values[k + 1] end
for name, value in pairs(byName) do
  if not string.find(name, ':', 1, true) then
    result[#result + 1] = name
    result[#result + 1] = value
    result[#result + 1] = tonumber(byName[name .. ':n']) or 0
  end
end
return result
