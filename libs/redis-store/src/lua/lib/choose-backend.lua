-- Shared helpers, inlined by embed-lua.ts wherever a script has an include line for this file.
--
-- The atomic routing rules: the choice of the policies that declare one (`atomicRule` in
-- libs/routing), evaluated next to the data so that deciding, reserving and recording are one step.
-- Each must choose exactly what the policy's TypeScript `choose` chooses on the same figures:
-- test/integration/rule-parity.int.test.ts runs both on thousands of random cases.
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

-- `cacheaware` (libs/routing/src/policies/cache-aware.ts, whose comment explains the rule):
-- valve, load-spread guard, cold placement by bounded-load rendezvous hashing, else the cheapest
-- candidate in ms with rendezvous rank breaking ties. p = the policy's parameters; request =
-- { textBytes, blockSizeBytes, maxTokens }. Returns the chosen index.
local COST_EPSILON_MS = 1e-9
local BOUND_EPSILON = 1e-9

local function chooseByCost(candidates, p, request)
  local count = #candidates
  local excluded = {}
  local saturated = 0
  for j, c in ipairs(candidates) do
    if p.saturationInflight > 0 and c.inflight >= p.saturationInflight then
      excluded[j] = 'saturated'
      saturated = saturated + 1
    end
  end
  -- A valve that would exclude every candidate is lifted: the cost rule runs over all of them.
  if saturated == count and count > 0 then excluded = {} end
  if p.spreadAbs ~= 0 then
    local minInflight = math.huge
    for j, c in ipairs(candidates) do
      if not excluded[j] and c.inflight < minInflight then minInflight = c.inflight end
    end
    local limit = math.max(minInflight + p.spreadAbs, minInflight * p.spreadRel)
    for j, c in ipairs(candidates) do
      if not excluded[j] and c.inflight > limit then excluded[j] = 'load-spread' end
    end
  end
  local eligible = {}
  for j = 1, count do
    if not excluded[j] then eligible[#eligible + 1] = j end
  end
  if #eligible == 0 then return indexOfLeastLoaded(candidates) end

  local anyWarm = false
  for _, c in ipairs(candidates) do
    if c.depth >= p.minMatchBlocks then anyWarm = true end
  end
  if p.minMatchBlocks > 0 and not anyWarm then
    -- Cold: the first eligible candidate in rendezvous order within its load bound.
    local totalInflight, totalWeight = 0, 0
    for _, j in ipairs(eligible) do
      totalInflight = totalInflight + candidates[j].inflight
      totalWeight = totalWeight + candidates[j].weight
    end
    local byRank = {}
    for _, j in ipairs(eligible) do byRank[#byRank + 1] = j end
    table.sort(byRank, function(a, b) return candidates[a].rank < candidates[b].rank end)
    for _, j in ipairs(byRank) do
      local c = candidates[j]
      local bound = math.ceil((p.coldLoadFactor * (totalInflight + 1) * c.weight) / totalWeight - BOUND_EPSILON)
      if c.inflight <= bound then return j end
    end
    local inEligible = {}
    for _, j in ipairs(eligible) do inEligible[j] = true end
    return indexOfLeastLoaded(candidates, function(j) return inEligible[j] end)
  end

  -- Warm: the cheapest eligible candidate; costs within COST_EPSILON_MS tie, the better rank wins.
  local best, bestCost, bestRank = 0, math.huge, nil
  for _, j in ipairs(eligible) do
    local c = candidates[j]
    local prefillTokens = math.ceil(math.max(0, request.textBytes - c.depth * request.blockSizeBytes) / p.bytesPerToken)
    local kvMs = 0
    if c.freeTokens >= 0 and math.max(0, c.freeTokens - c.pending) < prefillTokens + request.maxTokens then kvMs = p.kvFullMs end
    -- The same terms in the same order as cache-aware.ts (float addition is not associative).
    local cost = prefillTokens * p.prefillMsPerToken + c.inflight * p.queueMsPerRequest
      + math.max(c.pending * p.prefillMsPerToken, c.waiting * p.engineWaitingMs) + kvMs
    if cost <= bestCost + COST_EPSILON_MS then
      if cost < bestCost - COST_EPSILON_MS or best == 0 then
        best, bestCost, bestRank = j, cost, c.rank
      elseif c.rank < bestRank then
        best, bestRank = j, c.rank
      end
    end
  end
  return best
end

-- Parameters of the cost rule from ARGV[first .. first+7], in this order, and the engine terms' two.
local function costParams(first, engineWaitingMsAt, kvFullMsAt)
  return {
    engineWaitingMs = tonumber(ARGV[engineWaitingMsAt]),
    kvFullMs = tonumber(ARGV[kvFullMsAt]),
    bytesPerToken = tonumber(ARGV[first]),
    prefillMsPerToken = tonumber(ARGV[first + 1]),
    queueMsPerRequest = tonumber(ARGV[first + 2]),
    minMatchBlocks = tonumber(ARGV[first + 3]),
    saturationInflight = tonumber(ARGV[first + 4]),
    spreadAbs = tonumber(ARGV[first + 5]),
    spreadRel = tonumber(ARGV[first + 6]),
    coldLoadFactor = tonumber(ARGV[first + 7]),
  }
end
