--[[
  record-ownership: records that a backend holds the next part of a chain of blocks, the part that
  route.lua or prefill-done.lua left over (each records at most a bounded number of new blocks per
  call, so that no call keeps Redis busy for long). The caller sends the chain's next blocks and the
  block just before them (the anchor), and repeats until the whole chain is held:
  1. a new owner generation if due;
  2. unless the backend holds the anchor in the current generation (recorded after its forget mark;
     by prefix closure it then holds every block up to it), nothing is written and -1 is returned: a
     turn or a forget came in between, and the caller starts again from the chain's first block;
  3. otherwise the given blocks past the backend's depth among them are recorded, at most ARGV[7].
  So the backend's blocks stay prefix-closed, and each call sends and writes a bounded number of blocks.

  KEYS[1]  <ns>:{<tag>}:forgotten    HASH backend id -> '<ms forgotten>[|<retention ms>]'
  KEYS[2]  <ns>:{<tag>}:owners:new   HASH block hash -> owner list, current generation
  KEYS[3]  <ns>:{<tag>}:owners:old   HASH block hash -> owner list, previous generation
  KEYS[4]  <ns>:{<tag>}:generation   STRING ms the current generation started
  ARGV[1]  backend id
  ARGV[2]  now, ms since the Unix epoch
  ARGV[3]  block idle TTL, ms (0 = blocks never go idle)
  ARGV[4]  max blocks per pool (the owner index's cap, > 0)
  ARGV[5]  the anchor: the hash of the block before the given ones, decimal ('' = they start the chain)
  ARGV[6]  the chain's next block hashes, shallowest first, packed (lib/batched.lua)
  ARGV[7]  at most this many new blocks are recorded (> 0)

  Returns how many of the given blocks the backend holds afterwards (all unless ARGV[7] stopped it),
  or -1 when it does not hold the anchor.
]]

--#include lib/batched.lua
--#include lib/owner-index.lua

local backendId = ARGV[1]
local now, idleTtl, cap = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local anchor = ARGV[5]
local packedBlocks = ARGV[6]
local blockCount = packedBlockCount(packedBlocks)
if blockCount == 0 then return 0 end
local turned = rotateGenerations(KEYS[2], KEYS[3], KEYS[4], now, idleTtl, cap)
local thresholds = forgetThresholds({ backendId }, { redis.call('HGET', KEYS[1], backendId) }, now)
-- The anchor was recorded by the call before, which rewrote what was older than the record threshold.
local forgot = thresholds.record[backendId]
-- The anchor's time: the next blocks are recorded no newer than it (lib/owner-index.lua, index.record).
local anchorTime = nil
if anchor ~= '' then
  local owners = redis.call('HGET', KEYS[2], anchor)
  local marker = '\1' .. backendId .. '\2'
  local at = owners and string.find(owners, marker, 1, true)
  anchorTime = at and tonumber(string.match(owners, '^%d+', at + #marker)) or nil
  if not at or (forgot ~= nil and anchorTime <= forgot) then
    if turned then keepIndexAlive(KEYS[2], KEYS[3], KEYS[4], idleTtl, turned) end
    return -1
  end
end
local index = newOwnerIndex(KEYS[2], KEYS[3], blockCount, packedBlockReader(packedBlocks), thresholds)
local added, to = index.record(backendId, now, tonumber(ARGV[7]), anchorTime)
if added > 0 or turned then keepIndexAlive(KEYS[2], KEYS[3], KEYS[4], idleTtl, turned) end
return to
