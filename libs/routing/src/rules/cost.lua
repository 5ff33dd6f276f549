-- The cost rule (rules/cost.ts, the `cacheaware` policy): the Lua twin of evaluateCost in
-- libs/routing/src/policies/cache-aware.ts, evaluated next to the data inside route.lua so that
-- deciding, reserving and recording are one step. It returns its choice and reason; the codec
-- (rules/cost.ts) recomputes every candidate's cost terms with the TypeScript twin on the figures
-- route.lua returns, or takes this twin's own when its argument asks for them. libs/redis-store's
-- rule-parity.int.test.ts compares the decisions both ways on thousands of random cases.
--
-- argument (rules/cost.ts costRule's encode), two or three lines:
--   1. numbers, space-separated: the policy's parameters in COST_RULE_PARAMS' order (rules/cost.ts),
--      then the request's '<text bytes> <block size bytes> <generation budget tokens,
--      0 = none>', then 1 when the cost lines are wanted in the detail, else 0 (one pattern match reads
--      them all, where the parameters were JSON decoded by cjson);
--   2. the first RANKED_BACKENDS of the request's rendezvous order, as positions among the backends
--      given (1-based, most preferred first): a digit w (the characters per position), then each
--      position in w characters, most significant first, 6 bits each as the characters '0' (48) to 'o'
--      (111) (rules/cost.ts rankLine); a participant listed k-th has rank k - 1, one not listed ranks
--      after them all, by position (only a pool bigger than RANKED_BACKENDS has any). One string.byte
--      reads them all, where a decimal or base-36 list cost a pattern step and a tonumber per position;
--   3. (a LoRA adapter's request only) '<position base 36>:<ms>' per backend whose adapter wait is not 0,
--      comma-separated (RoutingRequest.adapterWaitMs); no line: 0 everywhere.
-- Contract of evaluateRule: rules/README.md.

--#include prefill-tokens.lua

-- Index of the least-loaded candidate among those `keep` accepts; ties go to the earlier one. 0 if none.
local function indexOfLeastLoaded(candidates, keep)
  local best, bestInflight, inflight = 0, math.huge, candidates.inflight
  for j = 1, candidates.count do
    if inflight[j] < bestInflight and (keep == nil or keep(j)) then
      best, bestInflight = j, inflight[j]
    end
  end
  return best
end

-- Exclusion codes of a cost line (CostLine.excluded in libs/routing): 0 none, 1 saturated, 2 load-spread.
local SATURATED, LOAD_SPREAD = 1, 2

-- Costs closer than this (ms) are equal; keeps float noise from raising a load bound by one.
local COST_EPSILON_MS = 1e-9
local BOUND_EPSILON = 1e-9

-- The cost lines, when asked for: one flat array of numbers (one table for all candidates: this runs for
-- every candidate of every decision), candidate j's field f at lines[(j - 1) * LINE + f].
local PREFILL_MS, BACKLOG_MS, QUEUE_MS, WAITING_MS, KV_MS, TOTAL_MS, EXCLUDED, HASH_RANK, BOUND, ADAPTER_MS =
  1, 2, 3, 4, 5, 6, 7, 8, 9, 10
local LINE = 10

-- The cheapest of `indices` by total cost; costs within COST_EPSILON_MS tie, and the better rendezvous
-- rank wins. 0 when `indices` is empty.
local function indexOfCheapest(indices, rank, total)
  local best, bestCost, bestRank = 0, math.huge, nil
  for _, j in ipairs(indices) do
    local cost = total[j]
    if cost <= bestCost + COST_EPSILON_MS then
      if cost < bestCost - COST_EPSILON_MS or best == 0 then
        best, bestCost, bestRank = j, cost, rank[j]
      elseif rank[j] < bestRank then
        best, bestRank = j, rank[j]
      end
    end
  end
  return best
end

-- `cacheaware` (libs/routing/src/policies/cache-aware.ts `evaluateCost`, whose comment explains the
-- rule): every candidate's cost, the valve, the load-spread guard, cold placement by bounded-load
-- rendezvous hashing, else the cheapest candidate in ms with rendezvous rank breaking ties; and the
-- reason. p = the policy's parameters; request = { textBytes, blockSizeBytes, maxTokens }; rank and
-- adapter: columns of the candidates' rendezvous ranks and adapter waits (nil: none). Returns chosen index, reason, valveLifted and, when `wantLines`, the cost
-- lines (see LINE: prefillMs, backlogMs, queueMs, waitingMs, kvMs, totalMs, excluded code, hashRank and
-- bound (both -1 unless cold placement ran and the candidate took part), adapterMs (each candidate's
-- `adapter` wait)), else nil: the rule itself reads only each candidate's total and exclusion, kept in
-- two arrays. workMs (prefillMs · prefillWorkWeight) is in totalMs but not on the line: the
-- explanation derives it from the parameters.
local function evaluateCost(candidates, rank, adapterWait, p, request, wantLines)
  local count = candidates.count
  local inflight, pending, depth, weight = candidates.inflight, candidates.pending, candidates.depth, candidates.weight
  local waitingOf, freeTokensOf = candidates.waiting, candidates.freeTokens
  local max, ceil = math.max, math.ceil
  local total, excluded = {}, {}
  local lines = wantLines and {} or nil
  local textBytes, blockSizeBytes, generation = request.textBytes, request.blockSizeBytes, request.maxTokens
  local bytesPerToken, prefillMsPerToken, queueMsPerRequest = p.bytesPerToken, p.prefillMsPerToken,
    p.queueMsPerRequest
  local prefillWorkWeight = p.prefillWorkWeight
  local engineWaitingMs, kvFullMs = p.engineWaitingMs, p.kvFullMs
  for j = 1, count do
    local tokens = prefillTokens(textBytes, blockSizeBytes, depth[j], bytesPerToken)
    local prefill = tokens * prefillMsPerToken
    local work = prefill * prefillWorkWeight
    local backlog = pending[j] * prefillMsPerToken
    local queue = inflight[j] * queueMsPerRequest
    local waiting = waitingOf[j] * engineWaitingMs
    local kv, free = 0, freeTokensOf[j]
    if free >= 0 and max(0, free - pending[j]) < tokens + generation then kv = kvFullMs end
    -- Only a LoRA adapter's request has adapter waits.
    local adapter = adapterWait and adapterWait[j] or 0
    -- The same terms in the same order as cache-aware.ts (float addition is not associative).
    total[j] = prefill + work + queue + max(backlog, waiting) + kv + adapter
    excluded[j] = 0
    if lines then
      local at = (j - 1) * LINE
      lines[at + PREFILL_MS], lines[at + BACKLOG_MS], lines[at + QUEUE_MS] = prefill, backlog, queue
      lines[at + WAITING_MS], lines[at + KV_MS], lines[at + ADAPTER_MS] = waiting, kv, adapter
      lines[at + TOTAL_MS], lines[at + HASH_RANK], lines[at + BOUND] = total[j], -1, -1
    end
  end
  -- The exclusions go onto the lines once the rule has decided (each return below).
  local function finish(chosen, reason, valveLifted, coldOrder)
    if lines then
      for j = 1, count do lines[(j - 1) * LINE + EXCLUDED] = excluded[j] end
    end
    return chosen, reason, valveLifted, lines, coldOrder
  end

  -- 1. Valve; one that would exclude every candidate is lifted.
  local saturated = 0
  if p.saturationInflight > 0 then
    for j = 1, count do
      if inflight[j] >= p.saturationInflight then
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
      if excluded[j] == 0 and inflight[j] < minInflight then minInflight = inflight[j] end
    end
    local limit = max(minInflight + p.spreadAbs, minInflight * p.spreadRel)
    for j = 1, count do
      if excluded[j] == 0 and inflight[j] > limit then
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
  if #eligible == 0 then return finish(indexOfLeastLoaded(candidates), 'least-loaded', valveLifted) end

  -- 4. Cold prompt: the first eligible candidate in rendezvous order within its load bound.
  local anyWarm = false
  for j = 1, count do
    if depth[j] >= p.minMatchBlocks then anyWarm = true end
  end
  if p.minMatchBlocks > 0 and not anyWarm then
    local totalInflight, totalWeight = 0, 0
    for _, j in ipairs(eligible) do
      totalInflight = totalInflight + inflight[j]
      totalWeight = totalWeight + weight[j]
    end
    local byRank = {}
    for _, j in ipairs(eligible) do byRank[#byRank + 1] = j end
    table.sort(byRank, function(a, b) return rank[a] < rank[b] end)
    local chosen = 0
    for position, j in ipairs(byRank) do
      local b = ceil((p.coldLoadFactor * (totalInflight + 1) * weight[j]) / totalWeight - BOUND_EPSILON)
      if lines then
        local at = (j - 1) * LINE
        lines[at + HASH_RANK], lines[at + BOUND] = position - 1, b
      end
      if chosen == 0 and inflight[j] <= b then chosen = j end
    end
    if chosen == 0 then
      local inEligible = {}
      for _, j in ipairs(eligible) do inEligible[j] = true end
      chosen = indexOfLeastLoaded(candidates, function(j) return inEligible[j] end)
    end
    return finish(chosen, 'cold-hash', valveLifted, byRank)
  end

  -- 5. The cheapest eligible candidate, and why it is not the warmest one the valve kept.
  local chosen = indexOfCheapest(eligible, rank, total)
  local cheapestUnguarded = guarded and indexOfCheapest(keptByValve, rank, total) or chosen
  local deepestMatch, deepestGuarded = -math.huge, false
  for _, j in ipairs(keptByValve) do
    local d, spread = depth[j], excluded[j] == LOAD_SPREAD
    if d > deepestMatch then
      deepestMatch, deepestGuarded = d, spread
    elseif d == deepestMatch and spread then
      deepestGuarded = true
    end
  end
  local reason = 'least-loaded'
  local chosenDepth = depth[chosen]
  if chosenDepth < deepestMatch then
    reason = deepestGuarded and 'load-guard' or 'spilled-from-saturated'
  elseif excluded[cheapestUnguarded] == LOAD_SPREAD then
    reason = 'load-guard'
  elseif chosenDepth >= max(1, p.minMatchBlocks) then
    reason = 'prefix-affinity'
  end
  return finish(chosen, reason, valveLifted)
end

-- The cost lines as one binary string: per candidate its LINE fields as little-endian doubles, in the
-- order above. Redis turns Lua numbers in a reply into integers; a packed double travels exact. One
-- struct.pack per PACKED_LINES candidates, not one each: ~5k instructions a call saved per candidate
-- (callgrind, issue 28), and never more than LINE * PACKED_LINES values on Lua's C stack.
local PACKED_LINES = 50
local function packCostLines(lines, count)
  local pack, parts = struct.pack, {}
  for first = 1, count, PACKED_LINES do
    local last = math.min(first + PACKED_LINES - 1, count)
    parts[#parts + 1] = pack('<' .. string.rep('d', LINE * (last - first + 1)), unpack(lines, (first - 1) * LINE + 1, last * LINE))
  end
  return table.concat(parts)
end

-- The argument's first line: 15 numbers (see the header), each a run of non-spaces.
local NUMBERS_LINE = '^' .. string.rep('(%S+) ', 14) .. '(%S+)\n()'

-- The rule's entry point (rules/README.md): parses the argument, ranks the participants, evaluates.
-- Detail: the reason, '1' when the valve was lifted, else '0', the packed cost lines when the argument
-- asks for them, else '' (the codec recomputes them: rules/cost.ts), and for a cold placement whose lines
-- the codec recomputes, the eligible candidates in the order it tried them (each index in 3 six-bit
-- characters from '0'), else ''; saturated = the valve was lifted (every participant at its in-flight
-- limit), which lets a split pool try its next cell.
local function evaluateRule(candidates, argument)
  local n1, n2, n3, n4, n5, n6, n7, n8, n9, n10, n11, textBytes, blockSizeBytes, maxTokens, linesWanted, rankStart =
    string.match(argument, NUMBERS_LINE)
  local p = {
    bytesPerToken = tonumber(n1), prefillMsPerToken = tonumber(n2), prefillWorkWeight = tonumber(n3),
    queueMsPerRequest = tonumber(n4), minMatchBlocks = tonumber(n5), saturationInflight = tonumber(n6),
    spreadAbs = tonumber(n7), spreadRel = tonumber(n8), coldLoadFactor = tonumber(n9), engineWaitingMs = tonumber(n10),
    kvFullMs = tonumber(n11),
  }
  local request = { textBytes = tonumber(textBytes), blockSizeBytes = tonumber(blockSizeBytes), maxTokens = tonumber(maxTokens) }
  local rankEnd = string.find(argument, '\n', rankStart, true)
  local rankOf, ranked = {}, 0
  local codes = { string.byte(argument, rankStart, rankEnd and rankEnd - 1 or -1) }
  local width = (codes[1] or 49) - 48
  for at = 2, #codes - width + 1, width do
    local position = 0
    for k = at, at + width - 1 do position = position * 64 + codes[k] - 48 end
    rankOf[position] = ranked
    ranked = ranked + 1
  end
  local count, position, rank = candidates.count, candidates.position, {}
  for j = 1, count do rank[j] = rankOf[position[j]] or (ranked + position[j]) end
  local adapterWait = nil
  if rankEnd then
    local indexOf = {}
    adapterWait = {}
    for j = 1, count do
      indexOf[position[j]] = j
      adapterWait[j] = 0
    end
    for at, ms in string.gmatch(string.sub(argument, rankEnd + 1), '(%w+):([^,]+)') do
      local j = indexOf[tonumber(at, 36)]
      if j then adapterWait[j] = tonumber(ms) end
    end
  end
  local chosen, reason, valveLifted, lines, coldOrder =
    evaluateCost(candidates, rank, adapterWait, p, request, linesWanted == '1')
  local leaseTokens = prefillTokens(request.textBytes, request.blockSizeBytes, candidates.depth[chosen], p.bytesPerToken)
  local packed = lines and packCostLines(lines, count) or ''
  -- A cold placement's order, for lines recomputed by the codec: its ranks past RANKED_BACKENDS are by
  -- position here, which the TypeScript rule's full rendezvous order does not reproduce.
  local order = ''
  if coldOrder and not lines then
    local codes, char = {}, string.char
    for k, j in ipairs(coldOrder) do
      codes[k] = char(48 + math.floor(j / 4096) % 64, 48 + math.floor(j / 64) % 64, 48 + j % 64)
    end
    order = table.concat(codes)
  end
  return chosen, leaseTokens, valveLifted, { reason, valveLifted and '1' or '0', packed, order }
end
