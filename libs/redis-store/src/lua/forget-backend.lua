--[[
  forget-backend: forgets what a backend is believed to hold in one pool (it was removed, restarted or
  its cache was reset) without scanning: records "forgotten at now", and snapshot.lua and reserve.lua
  ignore every ownership the backend recorded at or before that time. Its entries in block keys stay
  until those keys idle out or are evicted. Leases are untouched.

  The mark must outlive every entry it hides: those are at most one idle TTL old, so the hash lives for
  one idle TTL after the latest forget (forever with an idle TTL of 0; one field per backend).

  KEYS[1]  <ns>:{<tag>}:forgotten   HASH backend id -> ms it was forgotten
  ARGV[1]  now, ms since the Unix epoch
  ARGV[2]  backend id
  ARGV[3]  block idle TTL, ms (0 = blocks never go idle)

  Returns 1.
]]

local idleTtl = tonumber(ARGV[3])
redis.call('HSET', KEYS[1], ARGV[2], ARGV[1])
if idleTtl > 0 and redis.call('PTTL', KEYS[1]) < idleTtl then redis.call('PEXPIRE', KEYS[1], idleTtl) end
return 1
