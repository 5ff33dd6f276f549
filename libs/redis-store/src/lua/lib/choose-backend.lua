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

-- The cheapest of `indices`; costs within COST_EPSILON_MS tie, and the better rendezvous rank wins.
-- 0 when `indices` is empty.
local function indexOfCheapest(indices, candidates, lines)
  local best, bestCost, bestRank = 0, math.huge, nil
  for _, j in ipairs(indices) do
    local cost = lines[j].totalMs
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
-- maxTokens }. Returns chosen index, reason, valveLifted (boolean) and lines: per candidate
-- { prefillMs, backlogMs, queueMs, waitingMs, kvMs, totalMs, excluded (code), hashRank, bound }
-- (hashRank and bound -1 unless cold placement ran and the candidate took part).
local function evaluateCost(candidates, p, request)
  local count = #candidates
  local max, ceil = math.max, math.ceil
  local lines = {}
  for j, c in ipairs(candidates) do
    local prefillTokens = ceil(max(0, request.textBytes - c.depth * request.blockSizeBytes) / p.bytesPerToken)
    local prefillMs = prefillTokens * p.prefillMsPerToken
    local backlogMs = c.pending * p.prefillMsPerToken
    local queueMs = c.inflight * p.queueMsPerRequest
    local waitingMs = c.waiting * p.engineWaitingMs
    local kvMs = 0
    if c.freeTokens >= 0 and max(0, c.freeTokens - c.pending) < prefillTokens + request.maxTokens then kvMs = p.kvFullMs end
    lines[j] = {
      prefillMs = prefillMs, backlogMs = backlogMs, queueMs = queueMs, waitingMs = waitingMs, kvMs = kvMs,
      -- The same terms in the same order as cache-aware.ts (float addition is not associative).
      totalMs = prefillMs + queueMs + max(backlogMs, waitingMs) + kvMs,
      excluded = 0, hashRank = -1, bound = -1,
    }
  end

  -- 1. Valve; one that would exclude every candidate is lifted.
  local saturated = 0
  if p.saturationInflight > 0 then
    for j, c in ipairs(candidates) do
      if c.inflight >= p.saturationInflight then
        lines[j].excluded = SATURATED
        saturated = saturated + 1
      end
    end
  end
  local valveLifted = saturated == count and count > 0
  if valveLifted then
    for j = 1, count do lines[j].excluded = 0 end
  end
  -- 2. Load-spread guard, over what the valve kept.
  if p.spreadAbs ~= 0 then
    local minInflight = math.huge
    for j, c in ipairs(candidates) do
      if lines[j].excluded == 0 and c.inflight < minInflight then minInflight = c.inflight end
    end
    local limit = max(minInflight + p.spreadAbs, minInflight * p.spreadRel)
    for j, c in ipairs(candidates) do
      if lines[j].excluded == 0 and c.inflight > limit then lines[j].excluded = LOAD_SPREAD end
    end
  end
  local eligible, keptByValve = {}, {}
  for j = 1, count do
    if lines[j].excluded == 0 then eligible[#eligible + 1] = j end
    if lines[j].excluded ~= SATURATED then keptByValve[#keptByValve + 1] = j end
  end
  -- 3. Nothing left (cannot happen with the guard keeping the least-loaded): still serve.
  if #eligible == 0 then return indexOfLeastLoaded(candidates), 'least-loaded', valveLifted, lines end

  -- 4. Cold prompt: the first eligible candidate in rendezvous order within its load bound.
  local anyWarm = false
  for _, c in ipairs(candidates) do
    if c.depth >= p.minMatchBlocks then anyWarm = true end
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
      local bound = ceil((p.coldLoadFactor * (totalInflight + 1) * c.weight) / totalWeight - BOUND_EPSILON)
      lines[j].hashRank, lines[j].bound = position - 1, bound
      if chosen == 0 and c.inflight <= bound then chosen = j end
    end
    if chosen == 0 then
      local inEligible = {}
      for _, j in ipairs(eligible) do inEligible[j] = true end
      chosen = indexOfLeastLoaded(candidates, function(j) return inEligible[j] end)
    end
    return chosen, 'cold-hash', valveLifted, lines
  end

  -- 5. The cheapest eligible candidate, and why it is not the warmest one the valve kept.
  local chosen = indexOfCheapest(eligible, candidates, lines)
  local cheapestUnguarded = indexOfCheapest(keptByValve, candidates, lines)
  local deepestMatch = -math.huge
  for _, j in ipairs(keptByValve) do deepestMatch = max(deepestMatch, candidates[j].depth) end
  local deepestGuarded = false
  for _, j in ipairs(keptByValve) do
    if candidates[j].depth == deepestMatch and lines[j].excluded == LOAD_SPREAD then deepestGuarded = true end
  end
  local reason = 'least-loaded'
  local depth = candidates[chosen].depth
  if depth < deepestMatch then
    reason = deepestGuarded and 'load-guard' or 'spilled-from-saturated'
  elseif lines[cheapestUnguarded].excluded == LOAD_SPREAD then
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
  for j, l in ipairs(lines) do
    parts[j] = pack('<ddddddddd', l.prefillMs, l.backlogMs, l.queueMs, l.waitingMs, l.kvMs, l.totalMs, l.excluded, l.hashRank, l.bound)
  end
  return table.concat(parts)
end
