-- Shared helpers, inlined by embed-lua.ts wherever a script has an include line for this file
-- (Lua scripts cannot require each other; inclusion at embed time keeps one copy).
--
-- Lease accounting. The deadline index holds every lease of the pool once, as the member
-- <byte length of backend id>..':'..<backend id>..<lease id>; a lease counts in the inflight and
-- pending hashes exactly while its member is in the index.
local function leaseMember(backend, leaseId)
  return #backend .. ':' .. backend .. leaseId
end

-- Takes one lease off the backend's counters (its field goes when its last lease does). Returns the
-- backend's leases in flight afterwards.
local function uncount(inflightKey, pendingKey, backend, tokens)
  local left = redis.call('HINCRBY', inflightKey, backend, -1)
  if left <= 0 then
    redis.call('HDEL', inflightKey, backend)
    redis.call('HDEL', pendingKey, backend)
    return 0
  elseif tokens ~= 0 then
    redis.call('HINCRBY', pendingKey, backend, -tokens)
  end
  return left
end

-- Purges every expired lease of the pool (deadline <= now), 100 per ZRANGEBYSCORE: usually one empty
-- range read. Atomic with the rest of the script, so a lease is uncounted once however many race.
local function purgeExpiredLeases(prefix, deadlinesKey, inflightKey, pendingKey, now)
  repeat
    local expired = redis.call('ZRANGEBYSCORE', deadlinesKey, '-inf', now, 'LIMIT', 0, 100)
    for k = 1, #expired do
      local member = expired[k]
      local colon = string.find(member, ':', 1, true)
      local length = tonumber(string.sub(member, 1, colon - 1))
      local backend = string.sub(member, colon + 1, colon + length)
      local leaseId = string.sub(member, colon + length + 1)
      local prefillKey = prefix .. 'prefill:' .. backend
      local tokens = tonumber(redis.call('HGET', prefillKey, leaseId)) or 0
      redis.call('HDEL', prefillKey, leaseId)
      uncount(inflightKey, pendingKey, backend, tokens)
    end
    if #expired > 0 then redis.call('ZREM', deadlinesKey, unpack(expired)) end
  until #expired < 100
end


-- Keeps the lease keys alive: each lives at least one lease TTL beyond its newest lease, at most two.
-- A key is extended (to two lease TTLs) only when it has less than one left, so taking or renewing a
-- lease usually costs two PTTLs here; a replica with a shorter lease TTL never shortens a key (it only
-- extends keys below its own TTL). The pool's deadline index, inflight and pending hashes appear and
-- vanish together (fields go with the last lease), so the index's TTL speaks for all three.
local function keepLeaseKeysAlive(prefillKey, deadlinesKey, inflightKey, pendingKey, leaseTtl)
  if redis.call('PTTL', prefillKey) < leaseTtl then redis.call('PEXPIRE', prefillKey, 2 * leaseTtl) end
  if redis.call('PTTL', deadlinesKey) < leaseTtl then
    for _, key in ipairs({ deadlinesKey, inflightKey, pendingKey }) do
      redis.call('PEXPIRE', key, 2 * leaseTtl)
    end
  end
end

-- Takes (or re-takes) a lease on a backend: deadline now + leaseTtl in the pool's index, its prefill
-- tokens in the backend's prefill hash, counted once in inflight/pending (a lease id already live gets
-- the new deadline and tokens and still counts once). The lease keys live as long as their longest
-- lease. Returns the backend's leases in flight afterwards.
local function takeLease(prefillKey, deadlinesKey, inflightKey, pendingKey, backend, leaseId, tokens, leaseTtl, now)
  local inflight
  if redis.call('ZADD', deadlinesKey, now + leaseTtl, leaseMember(backend, leaseId)) == 1 then
    -- A new lease (the usual case): nothing of it to replace.
    redis.call('HSET', prefillKey, leaseId, tokens)
    inflight = redis.call('HINCRBY', inflightKey, backend, 1)
    redis.call('HINCRBY', pendingKey, backend, tokens)
  else
    local previousTokens = tonumber(redis.call('HGET', prefillKey, leaseId)) or 0
    redis.call('HSET', prefillKey, leaseId, tokens)
    inflight = tonumber(redis.call('HGET', inflightKey, backend))
    redis.call('HINCRBY', pendingKey, backend, tokens - previousTokens)
  end
  keepLeaseKeysAlive(prefillKey, deadlinesKey, inflightKey, pendingKey, leaseTtl)
  return inflight
end

-- Takes the prefill of each lease in `clears` ('<backend id>\t<lease id>\n' per lease) off its backend's
-- backlog, as prefill-done.lua does without recording: its pending tokens become 0 and leave the backend's
-- pending sum, only while the lease exists (a lease released or purged meanwhile is left alone). What a
-- router defers to its next decision in the pool, or sends alone when none comes in time
-- (clear-backlogs.lua; src/backlog-clears.ts). Idempotent.
local function clearBacklogs(prefix, pendingKey, clears)
  for backend, leaseId in string.gmatch(clears, '([^\t\n]*)\t([^\n]*)\n') do
    local prefillKey = prefix .. 'prefill:' .. backend
    local tokens = tonumber(redis.call('HGET', prefillKey, leaseId))
    if tokens ~= nil and tokens ~= 0 then
      redis.call('HSET', prefillKey, leaseId, 0)
      redis.call('HINCRBY', pendingKey, backend, -tokens)
    end
  end
end
