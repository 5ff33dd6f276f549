--[[
  flow-queue: one pool's admission queue, shared by every router replica (issue 30, flow control). While
  the pool has capacity and nobody waits, a request is admitted at once (one lease). Otherwise it is
  queued under a start tag of start-time fair queuing (SFQ, weighted by tokens): a flow's (a tenant's)
  next tag is max(virtual time, its previous finish) and its finish is that plus cost ÷ weight, so a
  flow that sends ten times its share queues behind everyone else's next request, on every replica.
  Each replica keeps its own requests in memory and asks (`poll`) whether its first one may go: it may
  when its rank in the shared queue is below the free slots. Time is Redis's own (TIME), so replicas
  whose clocks disagree share one queue exactly.

  A flow below its fair share of the pool's slots ((capacity + `express`) × its weight ÷ the weights of
  every flow with a request admitted, its own included) does not wait behind flows above theirs: it is
  admitted at once while the pool runs fewer than capacity + `express` requests. Fair queuing alone still makes a light
  tenant wait for a slot to free, which a pool filled by a greedy one frees only every service time ÷
  capacity; the express slots keep the light tenant's wait at zero, and the greedy tenant's requests go
  only below the capacity, so it drains back to its share.

  The score of a queued request is class × 2^48 + its start tag: a lower class (higher priority) always
  goes first, SFQ orders within a class. The tags are tokens of virtual time; when the queue empties the
  virtual time and every flow's finish start over from 0 (an idle pool forgets who was greedy).

  KEYS[1]  <ns>:{flow:<pool>}:inflight          ZSET request id → lease deadline ms (admitted, not yet left)
  KEYS[2]  <ns>:{flow:<pool>}:queue             ZSET request id → class × 2^48 + start tag
  KEYS[3]  <ns>:{flow:<pool>}:queue-deadlines   ZSET request id → ms after which it is dropped from the queue
  KEYS[4]  <ns>:{flow:<pool>}:state             HASH `v` virtual time; `f:<flow>` the flow's last finish tag
  KEYS[5]  <ns>:{flow:<pool>}:flows             HASH `n:<flow>` its admitted requests, `w:<flow>` its weight (flows with any)
  KEYS[6]  <ns>:{flow:<pool>}:owners            HASH request id → `<weight>:<flow>` (queued or admitted)
  ARGV[1]  op: 'enter' | 'poll' | 'leave' | 'renew'
  ARGV[2]  request id
  enter:   ARGV[3] capacity (requests in flight, ≥ 1), ARGV[4] lease TTL ms, ARGV[5] queue deadline ms from now,
           ARGV[6] flow id, ARGV[7] cost (tokens, > 0), ARGV[8] weight (> 0), ARGV[9] class (0, 1 or 2),
           ARGV[10] engines saturated 1/0 (then nothing is admitted while anything is in flight),
           ARGV[11] express slots (≥ 0)
  poll:    ARGV[3] capacity, ARGV[4] lease TTL ms, ARGV[5] engines saturated 1/0, ARGV[6] express slots
  renew:   ARGV[3] lease TTL ms
  leave:   nothing more

  Returns, enter and poll: { 1 admitted / 0 queued / -1 not in the queue (expired or left),
                             requests ahead of it beyond the free slots (0 when admitted), in flight after,
                             its score as a decimal string, exact (queued; 0 otherwise: the replica polls its own
                             in this order, ties by id as the sorted set breaks them) }
          renew: { 1 renewed / 0 gone }; leave: { removed from in-flight 1/0, removed from the queue 1/0 }
]]

local inflight, queue, deadlines, state, flows, owners = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local op, id = ARGV[1], ARGV[2]
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local CLASS_SPAN = 281474976710656
-- The state hash outlives a crashed fleet by this much at most (ms).
local STATE_TTL_MS = 600000

-- Forgets who sent `id`; an admitted one no longer counts for its flow.
local function forget(id, admitted)
  local owner = redis.call('HGET', owners, id)
  if not owner then return end
  redis.call('HDEL', owners, id)
  if not admitted then return end
  local flow = string.match(owner, '^[^:]*:(.*)$')
  if redis.call('HINCRBY', flows, 'n:' .. flow, -1) <= 0 then redis.call('HDEL', flows, 'n:' .. flow, 'w:' .. flow) end
end

local function purge()
  local lapsed = redis.call('ZRANGEBYSCORE', inflight, '-inf', now, 'LIMIT', 0, 256)
  if #lapsed > 0 then
    redis.call('ZREM', inflight, unpack(lapsed))
    for _, id in ipairs(lapsed) do forget(id, true) end
  end
  local expired = redis.call('ZRANGEBYSCORE', deadlines, '-inf', now, 'LIMIT', 0, 256)
  if #expired > 0 then
    redis.call('ZREM', deadlines, unpack(expired))
    redis.call('ZREM', queue, unpack(expired))
    for _, id in ipairs(expired) do forget(id, false) end
  end
  if redis.call('ZCARD', queue) == 0 then redis.call('DEL', state) end
end

local function admit(id, owner, ttl)
  local weight, flow = string.match(owner, '^([^:]*):(.*)$')
  redis.call('ZADD', inflight, now + ttl, id)
  redis.call('HSET', owners, id, owner)
  redis.call('HINCRBY', flows, 'n:' .. flow, 1)
  redis.call('HSET', flows, 'w:' .. flow, weight)
  redis.call('PEXPIRE', owners, STATE_TTL_MS)
  redis.call('PEXPIRE', flows, STATE_TTL_MS)
end

-- Whether the owner's flow runs fewer requests than its fair share of `slots` among other flows with one admitted.
local function belowShare(owner, slots)
  local weight, flow = string.match(owner, '^([^:]*):(.*)$')
  weight = tonumber(weight)
  local admitted, total = 0, weight
  local all = redis.call('HGETALL', flows)
  for i = 1, #all, 2 do
    local field = all[i]
    if field == 'n:' .. flow then admitted = tonumber(all[i + 1])
    elseif string.sub(field, 1, 2) == 'w:' and string.sub(field, 3) ~= flow then total = total + tonumber(all[i + 1]) end
  end
  -- Alone in the pool, a flow has nobody to be protected from: the capacity is its limit.
  if total == weight then return false end
  return admitted < slots * weight / total
end

-- Whether an express slot is open to `owner`: the engines are not saturated, the pool runs fewer than capacity + express.
local function expressFor(owner, capacity, saturated, running, express)
  if saturated == '1' or express <= 0 or running >= capacity + express then return false end
  return belowShare(owner, capacity + express)
end

local function freeSlots(capacity, saturated, running)
  if saturated == '1' then
    if running == 0 then return 1 end
    return 0
  end
  return capacity - running
end

if op == 'renew' then
  if not redis.call('ZSCORE', inflight, id) then return { 0 } end
  redis.call('ZADD', inflight, now + tonumber(ARGV[3]), id)
  redis.call('PEXPIRE', owners, STATE_TTL_MS)
  redis.call('PEXPIRE', flows, STATE_TTL_MS)
  return { 1 }
end
if op == 'leave' then
  local left = redis.call('ZREM', inflight, id)
  local dequeued = redis.call('ZREM', queue, id)
  redis.call('ZREM', deadlines, id)
  forget(id, left == 1)
  if dequeued == 1 and redis.call('ZCARD', queue) == 0 then redis.call('DEL', state) end
  return { left, dequeued }
end

purge()
local running = redis.call('ZCARD', inflight)
if op == 'enter' then
  local capacity, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
  local owner = ARGV[8] .. ':' .. ARGV[6]
  local waiting = redis.call('ZCARD', queue)
  if (waiting == 0 and freeSlots(capacity, ARGV[10], running) > 0)
    or expressFor(owner, capacity, ARGV[10], running, tonumber(ARGV[11]) or 0) then
    admit(id, owner, ttl)
    return { 1, 0, running + 1, 0 }
  end
  redis.call('HSET', owners, id, owner)
  redis.call('PEXPIRE', owners, STATE_TTL_MS)
  local flowField = 'f:' .. ARGV[6]
  local fields = redis.call('HMGET', state, 'v', flowField)
  local start = math.max(tonumber(fields[1]) or 0, tonumber(fields[2]) or 0)
  redis.call('HSET', state, flowField, start + tonumber(ARGV[7]) / tonumber(ARGV[8]))
  redis.call('PEXPIRE', state, STATE_TTL_MS)
  local score = tonumber(ARGV[9]) * CLASS_SPAN + start
  redis.call('ZADD', queue, score, id)
  redis.call('ZADD', deadlines, now + tonumber(ARGV[5]), id)
  local ahead = redis.call('ZRANK', queue, id) - math.max(0, freeSlots(capacity, ARGV[10], running))
  -- The exact score (%.17g: the double as stored), so the replica orders its waiters as the queue does.
  return { 0, math.max(0, ahead) + 1, running, string.format('%.17g', score) }
end
if op == 'poll' then
  local capacity, ttl = tonumber(ARGV[3]), tonumber(ARGV[4])
  local rank = redis.call('ZRANK', queue, id)
  if not rank then return { -1, 0, running, 0 } end
  local free = freeSlots(capacity, ARGV[5], running)
  local owner = redis.call('HGET', owners, id) or ('1:?' .. id)
  if rank < free or expressFor(owner, capacity, ARGV[5], running, tonumber(ARGV[6]) or 0) then
    local score = tonumber(redis.call('ZSCORE', queue, id))
    redis.call('ZREM', queue, id)
    redis.call('ZREM', deadlines, id)
    admit(id, owner, ttl)
    local tag = score % CLASS_SPAN
    local virtual = tonumber(redis.call('HGET', state, 'v')) or 0
    if redis.call('ZCARD', queue) == 0 then
      redis.call('DEL', state)
    elseif tag > virtual then
      redis.call('HSET', state, 'v', tag)
    end
    return { 1, 0, running + 1, 0 }
  end
  return { 0, rank - math.max(0, free) + 1, running, redis.call('ZSCORE', queue, id) }
end
error('flow-queue: unknown op ' .. op)
