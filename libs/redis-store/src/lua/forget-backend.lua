--[[
  forget-backend: forgets what a backend is believed to hold in one pool (it was removed, restarted or
  its cache was reset) without scanning: records "forgotten at now", and snapshot.lua and route.lua
  ignore every ownership entry the backend recorded at or before that time. The entries stay in the
  owner index until their generation is dropped. Leases are untouched. A retention learned for the
  backend (learn.lua) is kept: it describes the engine's cache size and load, not what it holds.

  The mark must outlive every entry it hides: the owner index keys live at most two idle TTLs after
  their last recording, so the hash lives two idle TTLs after the latest forget (forever with an idle
  TTL of 0; one field per backend).

  The backend's engine figures in the pool's slot go too (route.lua reads them): a removed backend
  leaves no field behind (discovered pods come and go), and a restarted one's are sent again by the
  routers when its engine reports anew.

  KEYS[1]  <ns>:{<tag>}:forgotten   HASH backend id -> '<ms forgotten>[|<retention ms>]'
  KEYS[2]  <ns>:{<tag>}:engine-figures HASH backend id -> its engine figures (route.lua)
  ARGV[1]  now, ms since the Unix epoch
  ARGV[2]  backend id
  ARGV[3]  block idle TTL, ms (0 = blocks never go idle)

  Returns 1.
]]

local idleTtl = tonumber(ARGV[3])
local previous = redis.call('HGET', KEYS[1], ARGV[2])
local bar = previous and string.find(previous, '|', 1, true)
redis.call('HSET', KEYS[1], ARGV[2], bar and (ARGV[1] .. string.sub(previous, bar)) or ARGV[1])
if idleTtl > 0 and redis.call('PTTL', KEYS[1]) < 2 * idleTtl then redis.call('PEXPIRE', KEYS[1], 2 * idleTtl) end
redis.call('HDEL', KEYS[2], ARGV[2])
return 1
