-- Shared helpers, inlined by embed-lua.ts wherever a script has an include line for this file.
--
-- The atomic routing rules: the choice of the policies that declare one (`atomicRule` in
-- libs/routing), evaluated next to the data so that deciding, reserving and recording are one step.
-- Each returns what its TypeScript twin returns on the same figures (the rule's AtomicOutcome: choice,
-- reason and, for the cost rule, every candidate's cost terms), which the policy turns into its
-- decision without running again: test/integration/rule-parity.int.test.ts compares the decisions
-- on thousands of random cases.
--
-- A candidate is { id, weight, rank, waiting, freeTokens, inflight, pending, depth }: rank = its place
-- in the rendezvous order of the request's head hash (0 = first preference, computed by the caller
-- with the policy's own hashing); waiting and freeTokens = its engine's own queue and reported free KV
-- (0 and -1 when unknown, as `engineWaiting` / `engineReportedFreeTokens` give them); candidates in
-- configuration order.

-- Index of the least-loaded candidate among those `keep` accepts; ties go to the earlier one. 0 if none.
local function indexOfLeastLoaded(candidates, keep)
  local best, bestInflight = 0, math.huge
  for j, c in ipairs(candidates) do
    if c.inflight < bestInflight and (keep == nil or keep(j)) then
      best, bestInflight = j, c.inflight
    end
  end
  return best
end

-- Exclusion codes of a cost line (CostLine.excluded in libs/routing): 0 none, 1 saturated, 2 load-spread.
local SATURATED, LOAD_SPREAD = 1, 2

-- Costs closer than this (ms) are equal; keeps float noise from raising a load bound by one.
local COST_EPSILON_MS = 1e-9
local BOUND_EPSILON = 1e-9

-- The cheapest of `indices` by `totalMs` (indexed by candidate); costs within COST_EPSILON_MS tie, and
-- the better rendezvous rank wins. 0 when `indices` is empty.
local function indexOfCheapest(indices, candidates, totalMs)
  local best, bestCost, bestRank = 0, math.huge, nil
  for _, j in ipairs(indices) do
    local cost = totalMs[j]
    if cost <= bestCost + COST_EPSILON_MS then
      if cost < bestCost - COST_EPSILON_MS or best == 0 then
        best, bestCost, bestRank = j, cost, candidates[j].rank
      elseif candidates[j].rank < bestRank then
        best, bestRank = j, candidates[j].rank
      end
    end
  end
  return best
end

-- `cacheaware` (libs/routing/src/policies/cache-aware.ts `evaluateCost`, whose comment explains the
-- rule): every candidate's cost terms, the valve, the load-spread guard, cold placement by bounded-load
-- rendezvous hashing, else the cheapest candidate in ms with rendezvous rank breaking ties; and the
-- reason. p = the policy's parameters (its JSON, decoded); request = { textBytes, blockSizeBytes,
-- maxTokens }. Returns chosen index, reason, valveLifted (boolean) and the cost lines: one array per
-- term, indexed by candidate (prefillMs, backlogMs, queueMs, waitingMs, kvMs, totalMs, excluded code,
-- hashRank and bound, the last two -1 unless cold placement ran and the candidate took part). Arrays
-- of numbers, not a table per candidate: this runs for every candidate of every decision.
local function evaluateCost(candidates, p, request)
  local count = #candidates
  local max, ceil = math.max, math.ceil
  local prefillMs, backlogMs, queueMs, waitingMs, kvMs, totalMs = {}, {}, {}, {}, {}, {}
  local excluded, hashRank, bound = {}, {}, {}
  local lines = {
    prefillMs = prefillMs, backlogMs = backlogMs, queueMs = queueMs, waitingMs = waitingMs, kvMs = kvMs,
    totalMs = totalMs, excluded = excluded, hashRank = hashRank, bound = bound,
  }
  local textBytes, blockSizeBytes, generation = request.textBytes, request.blockSizeBytes, request.maxTokens
  local bytesPerToken, prefillMsPerToken, queueMsPerRequest = p.bytesPerToken, p.prefillMsPerToken, p.queueMsPerRequest
  local engineWaitingMs, kvFullMs = p.engineWaitingMs, p.kvFullMs
  for j = 1, count do
    local c = candidates[j]
    local prefillTokens = ceil(max(0, textBytes - c.depth * blockSizeBytes) / bytesPerToken)
    local prefill = prefillTokens * prefillMsPerToken
    local backlog = c.pending * prefillMsPerToken
    local queue = c.inflight * queueMsPerRequest
    local waiting = c.waiting * engineWaitingMs
    local kv = 0
    if c.freeTokens >= 0 and max(0, c.freeTokens - c.pending) < prefillTokens + generation then kv = kvFullMs end
    prefillMs[j], backlogMs[j], queueMs[j], waitingMs[j], kvMs[j] = prefill, backlog, queue, waiting, kv
    -- The same terms in the same order as cache-aware.ts (float addition is not associative).
    totalMs[j] = prefill + queue + max(backlog, waiting) + kv
    excluded[j], hashRank[j], bound[j] = 0, -1, -1
  end

  -- 1. Valve; one that would exclude every candidate is lifted.
  local saturated = 0
  if p.saturationInflight > 0 then
    for j = 1, count do
      if candidates[j].inflight >= p.saturationInflight then
        excluded[j] = SATURATED
        saturated = saturated + 1
      end
    end
  end
  local valveLifted = saturated == count and count > 0
  if valveLifted then
    for j = 1, count do excluded[j] = 0 end
  end
  -- 2. Load-spread guard, over what the valve kept.
  local guarded = false
  if p.spreadAbs ~= 0 then
    local minInflight = math.huge
    for j = 1, count do
      if excluded[j] == 0 and candidates[j].inflight < minInflight then minInflight = candidates[j].inflight end
    end
    local limit = max(minInflight + p.spreadAbs, minInflight * p.spreadRel)
    for j = 1, count do
      if excluded[j] == 0 and candidates[j].inflight > limit then
        excluded[j] = LOAD_SPREAD
        guarded = true
      end
    end
  end
  -- Without a guard exclusion, the candidates the valve kept are the eligible ones.
  local eligible, keptByValve = {}, nil
  for j = 1, count do
    if excluded[j] == 0 then eligible[#eligible + 1] = j end
  end
  if guarded then
    keptByValve = {}
    for j = 1, count do
      if excluded[j] ~= SATURATED then keptByValve[#keptByValve + 1] = j end
    end
  else
    keptByValve = eligible
  end
  -- 3. Nothing left (cannot happen with the guard keeping the least-loaded): still serve.
  if #eligible == 0 then return indexOfLeastLoaded(candidates), 'least-loaded', valveLifted, lines end

  -- 4. Cold prompt: the first eligible candidate in rendezvous order within its load bound.
  local anyWarm = false
  for j = 1, count do
    if candidates[j].depth >= p.minMatchBlocks then anyWarm = true end
  end
  if p.minMatchBlocks > 0 and not anyWarm then
    local totalInflight, totalWeight = 0, 0
    for _, j in ipairs(eligible) do
      totalInflight = totalInflight + candidates[j].inflight
      totalWeight = totalWeight + candidates[j].weight
    end
    local byRank = {}
    for _, j in ipairs(eligible) do byRank[#byRank + 1] = j end
    table.sort(byRank, function(a, b) return candidates[a].rank < candidates[b].rank end)
    local chosen = 0
    for position, j in ipairs(byRank) do
      local c = candidates[j]
      local b = ceil((p.coldLoadFactor * (totalInflight + 1) * c.weight) / totalWeight - BOUND_EPSILON)
      hashRank[j], bound[j] = position - 1, b
      if chosen == 0 and c.inflight <= b then chosen = j end
    end
    if chosen == 0 then
      local inEligible = {}
      for _, j in ipairs(eligible) do inEligible[j] = true end
      chosen = indexOfLeastLoaded(candidates, function(j) return inEligible[j] end)
    end
    return chosen, 'cold-hash', valveLifted, lines
  end

  -- 5. The cheapest eligible candidate, and why it is not the warmest one the valve kept.
  local chosen = indexOfCheapest(eligible, candidates, totalMs)
  local cheapestUnguarded = guarded and indexOfCheapest(keptByValve, candidates, totalMs) or chosen
  local deepestMatch, deepestGuarded = -math.huge, false
  for _, j in ipairs(keptByValve) do
    local d = candidates[j].depth
    if d > deepestMatch then
      deepestMatch, deepestGuarded = d, excluded[j] == LOAD_SPREAD
    elseif d == deepestMatch and excluded[j] == LOAD_SPREAD then
      deepestGuarded = true
    end
  end
  local reason = 'least-loaded'
  local depth = candidates[chosen].depth
  if depth < deepestMatch then
    reason = deepestGuarded and 'load-guard' or 'spilled-from-saturated'
  elseif excluded[cheapestUnguarded] == LOAD_SPREAD then
    reason = 'load-guard'
  elseif depth >= max(1, p.minMatchBlocks) then
    reason = 'prefix-affinity'
  end
  return chosen, reason, valveLifted, lines
end

-- The cost lines as one binary string: per candidate 9 little-endian doubles, in the order
-- prefillMs, backlogMs, queueMs, waitingMs, kvMs, totalMs, excluded, hashRank, bound. Redis turns Lua
-- numbers in a reply into integers; a packed double travels exact, for ~0.5 µs per candidate (a
-- decimal string by string.format('%.17g') costs ~1.3 µs per number).
local function packCostLines(lines)
  local pack, parts = struct.pack, {}
  local prefillMs, backlogMs, queueMs, waitingMs, kvMs = lines.prefillMs, lines.backlogMs, lines.queueMs, lines.waitingMs, lines.kvMs
  local totalMs, excluded, hashRank, bound = lines.totalMs, lines.excluded, lines.hashRank, lines.bound
  for j = 1, #totalMs do
    parts[j] = pack('<ddddddddd', prefillMs[j], backlogMs[j], queueMs[j], waitingMs[j], kvMs[j], totalMs[j], excluded[j], hashRank[j], bound[j])
  end
  return table.concat(parts)
end
