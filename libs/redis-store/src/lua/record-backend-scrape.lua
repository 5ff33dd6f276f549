--[[
  record-backend-scrape: one scrape of one backend, recorded atomically: health hysteresis on the
  counters kept in the backend's state hash, the last engine restart seen, the state to publish, its
  expiry, the index of states, and a PUBLISH of the new state when its health or its observation
  changed or a restart was seen.

  Hysteresis: a failed health probe adds a failure and zeroes the successes, a passed one the reverse.
  A healthy backend turns unhealthy at failuresToUnhealthy consecutive failures, an unhealthy one
  healthy at successesToHealthy consecutive successes. A backend without a state hash (its first
  scrape, or nobody scraped it for a TTL and the hash expired) takes the outcome of this probe.

  Restarts: the poller tells the script when this scrape found the engine restarted (ARGV[10]); the
  hash keeps the newest such time (a late scrape of another replica cannot move it back) and every
  state carries it as restartedAtMs until the hash expires.

  KEYS[1]  <ns>:{fleet}:backend-state:<id>   HASH healthy '1'|'0', failures, successes, changedAt (ms),
                                             restartedAt (ms), observation (JSON), state (JSON),
                                             carry (opaque)
  KEYS[2]  <ns>:{fleet}:backend-states       ZSET backend id -> ms its state hash expires
  ARGV[1]  backend id
  ARGV[2]  now: ms since the Unix epoch when the scrape finished (the state's scrapedAtMs)
  ARGV[3]  '1' the health probe passed, '0' it failed
  ARGV[4]  failuresToUnhealthy, integer >= 1
  ARGV[5]  successesToHealthy, integer >= 1
  ARGV[6]  TTL of the state hash, ms
  ARGV[7]  channel that gets the new state JSON on a change: <ns>:{fleet}:backend-states:changes
  ARGV[8]  observation JSON: a non-empty object (engine, failure, load figures, LoRA adapters), compared as
           text; the state JSON is this text with the state's own fields appended
  ARGV[9]  carry: text the next scrape reads back (HGET carry); '' keeps the stored one
  ARGV[10] ms since the Unix epoch of an engine restart this scrape found (the scrape's now); '' none

  Returns {state JSON, published 1|0}. The state JSON is the observation plus backendId, healthy,
  consecutiveFailures, consecutiveSuccesses, healthyChangedAtMs, scrapedAtMs and restartedAtMs (null
  while no restart is recorded) (cjson keeps integers up to 14 digits exact, ms timestamps included; the
  observation's own numbers are kept as the poller wrote them).
]]

local id = ARGV[1]
local now = tonumber(ARGV[2])
local passed = ARGV[3] == '1'
local failuresToUnhealthy = tonumber(ARGV[4])
local successesToHealthy = tonumber(ARGV[5])
local ttl = tonumber(ARGV[6])
local observation = ARGV[8]

local previous = redis.call('HMGET', KEYS[1], 'healthy', 'failures', 'successes', 'changedAt', 'observation', 'restartedAt')
local known = previous[1] ~= false
local wasHealthy = previous[1] == '1'
local healthy, failures, successes, changedAt
if not known then
  healthy = passed
  failures = passed and 0 or 1
  successes = passed and 1 or 0
  changedAt = now
else
  failures = tonumber(previous[2]) or 0
  successes = tonumber(previous[3]) or 0
  if passed then
    successes = successes + 1
    failures = 0
  else
    failures = failures + 1
    successes = 0
  end
  healthy = wasHealthy
  if wasHealthy and failures >= failuresToUnhealthy then healthy = false end
  if not wasHealthy and successes >= successesToHealthy then healthy = true end
  changedAt = tonumber(previous[4]) or now
  if healthy ~= wasHealthy then changedAt = now end
end
local restartedAt = tonumber(previous[6])
local seen = tonumber(ARGV[10])
local restarted = seen ~= nil and (restartedAt == nil or seen > restartedAt)
if restarted then restartedAt = seen end
local changed = (not known) or healthy ~= wasHealthy or observation ~= previous[5] or restarted

-- The state is the observation's own text with these fields appended: decoding and re-encoding it would
-- turn an empty list into {} (cjson cannot tell an empty array from an empty object) and round numbers.
local fields = cjson.encode({
  backendId = id,
  healthy = healthy,
  consecutiveFailures = failures,
  consecutiveSuccesses = successes,
  healthyChangedAtMs = changedAt,
  scrapedAtMs = now,
  restartedAtMs = restartedAt or cjson.null,
})
local stateJson = string.sub(observation, 1, -2) .. ',' .. string.sub(fields, 2)

redis.call('HSET', KEYS[1], 'healthy', healthy and '1' or '0', 'failures', failures, 'successes', successes,
  'changedAt', changedAt, 'observation', observation, 'state', stateJson)
if ARGV[9] ~= '' then redis.call('HSET', KEYS[1], 'carry', ARGV[9]) end
if restarted then redis.call('HSET', KEYS[1], 'restartedAt', restartedAt) end
redis.call('PEXPIRE', KEYS[1], ttl)

-- The index outlives its longest-lived member; members whose hash has expired are dropped here.
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
redis.call('ZADD', KEYS[2], now + ttl, id)
if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end

if changed then redis.call('PUBLISH', ARGV[7], stateJson) end
return {stateJson, changed and 1 or 0}
