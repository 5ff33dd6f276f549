--[[
  change-backend-set: one change to the fleet's backend set (the backends every router replica routes
  over), together with the version bump and the announcement: a reader that sees version v sees every
  change up to v, and no change goes unannounced. A call that changes nothing leaves the version alone
  and publishes nothing.

  The version of a set created afresh (first seed, or Redis lost its data) starts at now (ms), not 1:
  a reader still holding the lost set's version then cannot mistake the new set for the one it knew.

  ARGV[1] operation:
    'seed'         ARGV[4 ..] pairs of backend id, entry JSON: adds each id that is neither in the set nor
                   marked removed. Never overwrites (HSETNX semantics): the shared set wins over any
                   replica's config, and a backend removed through the admin API stays removed when a
                   replica restarts with the old config.
    'add'          ARGV[4] backend id, ARGV[5] entry JSON: adds it unless the id is taken; clears its
                   removed mark.
    'remove'       ARGV[4] backend id: deletes it and marks it removed (at now).
    'set-drained'  ARGV[4] backend id, ARGV[5] '1' drain | '0' undrain: sets the entry's `drained` and
                   `updatedAtMs` (cjson: integers up to 14 digits, ms timestamps included, stay exact).

  KEYS[1]  <ns>:{fleet}:backends          HASH backend id -> entry JSON {id, url, models?, weight, drained, updatedAtMs}
  KEYS[2]  <ns>:{fleet}:backends:version  STRING the set's version
  KEYS[3]  <ns>:{fleet}:backends:removed  HASH backend id -> ms it was removed (read by 'seed' only)
  ARGV[1]  operation (above)
  ARGV[2]  now, ms since the Unix epoch
  ARGV[3]  channel that gets the new version: <ns>:{fleet}:backends:changes
  ARGV[4 ..] per operation (above)

  Returns {version, changed, existed}: version after the call (0 = the set was never written);
  changed = entries added, deleted or modified (0 = nothing to do); existed = 1 if ARGV[4] was in the
  set before the call ('add': the id is taken; 'remove', 'set-drained': 0 = no such backend; 'seed': 0).
]]

local operation = ARGV[1]
local now = tonumber(ARGV[2])
local channel = ARGV[3]

local function currentVersion()
  return tonumber(redis.call('GET', KEYS[2])) or 0
end

local function bumpVersion()
  local version
  if redis.call('EXISTS', KEYS[2]) == 0 then
    version = now
    redis.call('SET', KEYS[2], version)
  else
    version = redis.call('INCR', KEYS[2])
  end
  redis.call('PUBLISH', channel, version)
  return version
end

if operation == 'seed' then
  local added = 0
  for i = 4, #ARGV - 1, 2 do
    local id = ARGV[i]
    if redis.call('HEXISTS', KEYS[3], id) == 0 and redis.call('HSETNX', KEYS[1], id, ARGV[i + 1]) == 1 then
      added = added + 1
    end
  end
  if added == 0 then return { currentVersion(), 0, 0 } end
  return { bumpVersion(), added, 0 }
end

local id = ARGV[4]

if operation == 'add' then
  if redis.call('HSETNX', KEYS[1], id, ARGV[5]) == 0 then return { currentVersion(), 0, 1 } end
  redis.call('HDEL', KEYS[3], id)
  return { bumpVersion(), 1, 0 }
end

if operation == 'remove' then
  if redis.call('HDEL', KEYS[1], id) == 0 then return { currentVersion(), 0, 0 } end
  redis.call('HSET', KEYS[3], id, now)
  return { bumpVersion(), 1, 1 }
end

if operation == 'set-drained' then
  local raw = redis.call('HGET', KEYS[1], id)
  if not raw then return { currentVersion(), 0, 0 } end
  local entry = cjson.decode(raw)
  local drained = ARGV[5] == '1'
  if entry.drained == drained then return { currentVersion(), 0, 1 } end
  entry.drained = drained
  entry.updatedAtMs = now
  redis.call('HSET', KEYS[1], id, cjson.encode(entry))
  return { bumpVersion(), 1, 1 }
end

return redis.error_reply('change-backend-set: unknown operation ' .. tostring(operation))
