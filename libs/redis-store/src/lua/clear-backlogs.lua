--[[
  clear-backlogs: the prefill of each lease listed leaves its backend's backlog (a non-streaming request's
  estimated end of prefill has passed: the router's Lease.clearBacklogAfter). A router carries these with its
  next decision in the pool (route.lua ARGV[15]); this script sends the ones no decision took in time
  (src/backlog-clears.ts), many in one call. Only the backlog: ownership is recorded by the release.

  KEYS[1]  <ns>:{<tag>}:pending   HASH backend id -> pending prefill tokens
  ARGV[1]  pool key prefix '<ns>:{<tag>}:' (prefill keys = prefix..'prefill:'..backend)
  ARGV[2]  the leases: '<backend id>\t<lease id>\n' each (lib/lease-accounting.lua clearBacklogs)

  Returns 1.
]]

--#include lib/lease-accounting.lua

clearBacklogs(ARGV[1], KEYS[1], ARGV[2])
return 1
