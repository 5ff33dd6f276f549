--[[
  snapshot: what the router needs to decide one request of one pool, in one round trip. Purges the
  pool's expired leases (one range read of the deadline index when none is due), then for each
  candidate backend reads its in-flight leases and pending prefill tokens (one HMGET each for all
  backends) and finds how many leading blocks of the request it holds.

  Match depth by binary search: recording keeps every backend's blocks prefix-closed (holding block i
  implies holding 0..i-1, see reserve.lua), so "backend b holds block i" is monotone in i. Block 1 is
  probed first (backends absent there match 0), then each owner is searched over the remaining blocks.
  A probe is one HGETALL of a block key (backend -> last touch), memoized across backends: owners of
  the same depth walk the same path, so the cost is O(log(blocks) x owners), not backends x blocks.
  A field counts only while fresh (touched within the idle TTL) and touched after the backend was
  forgotten.

  KEYS[1]  <ns>:{<tag>}:forgotten        HASH backend id -> ms it was forgotten
  KEYS[2]  <ns>:{<tag>}:lease-deadlines  ZSET lease member -> deadline ms, every lease of the pool
  KEYS[3]  <ns>:{<tag>}:inflight         HASH backend id -> leases in flight
  KEYS[4]  <ns>:{<tag>}:pending          HASH backend id -> pending prefill tokens
  ARGV[1]  now, ms since the Unix epoch
  ARGV[2]  pool key prefix '<ns>:{<tag>}:'; block keys = prefix..'blk:'..hash,
           prefill keys = prefix..'prefill:'..backend
  ARGV[3]  block idle TTL, ms (0 = blocks never go idle)
  ARGV[4]  B, the number of backends
  ARGV[5 .. 4+B]     backend ids
  ARGV[5+B .. #ARGV] the request's block hashes, shallowest first, as decimal integers (may be none)

  Returns a flat array of 3*B integers; for the j-th backend (1-based):
    [3j-2] leases in flight (unexpired), [3j-1] pending prefill tokens, [3j] matched blocks (0..N)
]]

--#include lib/lease-accounting.lua

local now = tonumber(ARGV[1])
local prefix = ARGV[2]
local idleTtl = tonumber(ARGV[3])
local backendCount = tonumber(ARGV[4])
local firstBlock = 5 + backendCount
local blockCount = #ARGV - firstBlock + 1
-- Touch timestamps are positive, so -1 means "everything is fresh".
local oldestFresh = -1
if idleTtl > 0 then oldestFresh = now - idleTtl end

purgeExpiredLeases(prefix, KEYS[2], KEYS[3], KEYS[4], now)

local forgottenAt, inflightOf, pendingOf = {}, {}, {}
if backendCount > 0 then
  local marks = redis.call('HMGET', KEYS[1], unpack(ARGV, 5, 4 + backendCount))
  local inflight = redis.call('HMGET', KEYS[3], unpack(ARGV, 5, 4 + backendCount))
  local pending = redis.call('HMGET', KEYS[4], unpack(ARGV, 5, 4 + backendCount))
  for j = 1, backendCount do
    forgottenAt[j] = tonumber(marks[j]) or -1
    inflightOf[j] = tonumber(inflight[j]) or 0
    pendingOf[j] = tonumber(pending[j]) or 0
  end
end

-- probes[i] = { [backend id] = last touch ms } of block i (1-based), read at most once per call.
local probes = {}
local function probe(i)
  local owners = probes[i]
  if owners == nil then
    owners = {}
    local flat = redis.call('HGETALL', prefix .. 'blk:' .. ARGV[firstBlock + i - 1])
    for k = 1, #flat, 2 do
      owners[flat[k]] = tonumber(flat[k + 1])
    end
    probes[i] = owners
  end
  return owners
end

local result = {}
for j = 1, backendCount do
  local backend = ARGV[4 + j]
  local forgot = forgottenAt[j]
  local function holds(i)
    local touched = probe(i)[backend]
    return touched ~= nil and touched >= oldestFresh and touched > forgot
  end
  -- Largest depth d such that the backend holds blocks 1..d.
  local depth = 0
  if blockCount > 0 and holds(1) then
    local low, high = 1, blockCount
    while low < high do
      local middle = math.floor((low + high + 1) / 2)
      if holds(middle) then low = middle else high = middle - 1 end
    end
    depth = low
  end

  result[3 * j - 2] = inflightOf[j]
  result[3 * j - 1] = pendingOf[j]
  result[3 * j] = depth
end
return result
