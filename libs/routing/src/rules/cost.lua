-- The cost rule (rules/cost.ts, the `cacheaware` policy): the Lua twin of evaluateCost in
-- libs/routing/src/policies/cache-aware.ts, evaluated next to the data inside route.lua so that
-- deciding, reserving and recording are one step. It returns its choice and reason; the codec
-- (rules/cost.ts) recomputes every candidate's cost terms with the TypeScript twin on the figures
-- route.lua returns, or takes this twin's own when its argument asks for them. libs/redis-store's
-- rule-parity.int.test.ts compares the decisions both ways on thousands of random cases.
--
-- argument (rules/cost.ts costRule's encode), three or four lines:
--   1. the policy's parameters, space-separated, in COST_RULE_PARAMS' order (rules/cost.ts): the same in
--      every call of a router (per unit), so parsed once and then looked up (parametersOf);
--   2. the request's '<text bytes> <block size bytes> <generation budget tokens, 0 = none>', then 1 when
--      the cost lines are wanted in the detail, else 0 (one pattern match reads them);
--   3. the first RANKED_BACKENDS of the request's rendezvous order, as positions among the backends
--      given (1-based, most preferred first): a digit w (the characters per position), then each
--      position in w characters, most significant first, 6 bits each as the characters '0' (48) to 'o'
--      (111) (rules/cost.ts rankLine); a participant listed k-th has rank k - 1, one not listed ranks
--      after them all, by position (only a pool bigger than RANKED_BACKENDS has any). One string.byte
--      reads them all, where a decimal or base-36 list cost a pattern step and a tonumber per position;
--   4. (a LoRA adapter's request only) '<position base 36>:<ms>' per backend whose adapter wait is not 0,
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
  local total, excluded = {}, {}
  local lines = wantLines and {} or nil
  local textBytes, blockSizeBytes, generation = request.textBytes, request.blockSizeBytes, request.maxTokens
  local bytesPerToken, prefillMsPerToken, queueMsPerRequest = p.bytesPerToken, p.prefillMsPerToken,
    p.queueMsPerRequest
  local prefillWorkWeight = p.prefillWorkWeight
  local engineWaitingMs, kvFullMs = p.engineWaitingMs, p.kvFullMs
  local saturationInflight, minMatchBlocks = p.saturationInflight, p.minMatchBlocks
  -- One pass for the costs and what the valve and the guard need: this runs for every candidate of every
  -- decision, so math.max, math.ceil and prefillTokens are written out here (a C or Lua call costs more
  -- than the arithmetic; rule-parity.int.test.ts holds the results to the TypeScript rule's).
  local saturated, minKept, minAll, anyWarm = 0, math.huge, math.huge, false
  for j = 1, count do
    local matched = depth[j]
    if matched >= minMatchBlocks then anyWarm = true end
    -- prefillTokens(textBytes, blockSizeBytes, matched, bytesPerToken), inline: ceil(max(0, x) / b).
    local unmatched = textBytes - matched * blockSizeBytes
    local tokens = 0
    if unmatched > 0 then
      tokens = unmatched / bytesPerToken
      local whole = tokens - tokens % 1
      if whole < tokens then tokens = whole + 1 end
    end
    local prefill = tokens * prefillMsPerToken
    local queued, held = inflight[j], pending[j]
    local backlog = held * prefillMsPerToken
    local queue = queued * queueMsPerRequest
    local waiting = waitingOf[j] * engineWaitingMs
    local kv, free = 0, freeTokensOf[j]
    if free >= 0 then
      local room = free - held
      if room < 0 then room = 0 end
      if room < tokens + generation then kv = kvFullMs end
    end
    -- Only a LoRA adapter's request has adapter waits.
    local adapter = adapterWait and adapterWait[j] or 0
    -- The same terms in the same order as cache-aware.ts (float addition is not associative).
    total[j] = prefill + prefill * prefillWorkWeight + queue + (backlog < waiting and waiting or backlog) + kv + adapter
    if queued < minAll then minAll = queued end
    if saturationInflight > 0 and queued >= saturationInflight then
      excluded[j] = SATURATED
      saturated = saturated + 1
    else
      excluded[j] = 0
      if queued < minKept then minKept = queued end
    end
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

  -- 1. Valve (the exclusions above); one that would exclude every candidate is lifted.
  local valveLifted = saturated == count and count > 0
  if valveLifted then
    for j = 1, count do excluded[j] = 0 end
    minKept = minAll
  end
  -- 2. Load-spread guard, over what the valve kept; with it, the eligible candidates, the cheapest of them
  -- and of all the valve kept (costs within COST_EPSILON_MS tie and the better rendezvous rank wins),
  -- and the deepest match the valve kept, in one pass. The cheapest-so-far step is written out twice, not
  -- called: a call per candidate costs more than its comparisons.
  local spreadAbs = p.spreadAbs
  local limit = math.huge
  if spreadAbs ~= 0 then
    limit = minKept + spreadAbs
    local relative = minKept * p.spreadRel
    if relative > limit then limit = relative end
  end
  local guarded, eligible = false, {}
  local chosen, chosenCost, chosenRank = 0, math.huge, nil
  local unguarded, unguardedCost, unguardedRank = 0, math.huge, nil
  local deepestMatch, deepestGuarded = -math.huge, false
  for j = 1, count do
    if excluded[j] == 0 then
      local spread = inflight[j] > limit
      local cost, d = total[j], depth[j]
      if spread then
        excluded[j] = LOAD_SPREAD
        guarded = true
      else
        eligible[#eligible + 1] = j
        if cost <= chosenCost + COST_EPSILON_MS then
          if cost < chosenCost - COST_EPSILON_MS or chosen == 0 then
            chosen, chosenCost, chosenRank = j, cost, rank[j]
          elseif rank[j] < chosenRank then
            chosen, chosenRank = j, rank[j]
          end
        end
      end
      if cost <= unguardedCost + COST_EPSILON_MS then
        if cost < unguardedCost - COST_EPSILON_MS or unguarded == 0 then
          unguarded, unguardedCost, unguardedRank = j, cost, rank[j]
        elseif rank[j] < unguardedRank then
          unguarded, unguardedRank = j, rank[j]
        end
      end
      if d > deepestMatch then
        deepestMatch, deepestGuarded = d, spread
      elseif d == deepestMatch and spread then
        deepestGuarded = true
      end
    end
  end
  -- 3. Nothing left (cannot happen with the guard keeping the least-loaded): still serve.
  if #eligible == 0 then return finish(indexOfLeastLoaded(candidates), 'least-loaded', valveLifted) end

  -- 4. Cold prompt: the first eligible candidate in rendezvous order within its load bound.
  if minMatchBlocks > 0 and not anyWarm then
    local totalInflight, totalWeight = 0, 0
    for _, j in ipairs(eligible) do
      totalInflight = totalInflight + inflight[j]
      totalWeight = totalWeight + weight[j]
    end
    local byRank = {}
    for _, j in ipairs(eligible) do byRank[#byRank + 1] = j end
    table.sort(byRank, function(a, b) return rank[a] < rank[b] end)
    local placed = 0
    for position, j in ipairs(byRank) do
      local b = math.ceil((p.coldLoadFactor * (totalInflight + 1) * weight[j]) / totalWeight - BOUND_EPSILON)
      if lines then
        local at = (j - 1) * LINE
        lines[at + HASH_RANK], lines[at + BOUND] = position - 1, b
      end
      if placed == 0 and inflight[j] <= b then placed = j end
    end
    if placed == 0 then
      local inEligible = {}
      for _, j in ipairs(eligible) do inEligible[j] = true end
      placed = indexOfLeastLoaded(candidates, function(j) return inEligible[j] end)
    end
    return finish(placed, 'cold-hash', valveLifted, byRank)
  end

  -- 5. The cheapest eligible candidate (above), and why it is not the warmest one the valve kept.
  local reason = 'least-loaded'
  local chosenDepth = depth[chosen]
  if chosenDepth < deepestMatch then
    reason = deepestGuarded and 'load-guard' or 'spilled-from-saturated'
  elseif excluded[unguarded] == LOAD_SPREAD then
    reason = 'load-guard'
  elseif chosenDepth >= math.max(1, minMatchBlocks) then
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

-- The argument's first line: the 11 parameters; its second: the request's 4 numbers. Each a run of non-spaces.
local PARAMETERS_LINE = '^' .. string.rep('(%S+) ', 10) .. '(%S+)$'
local REQUEST_LINE = '^(%S+) (%S+) (%S+) (%S+)\n()'

-- The parameters of a first line, parsed once per distinct line: 11 strtod calls (~1.7k instructions
-- each) and a table, where a lookup of the line is one string.sub. Called as a Redis Function
-- (src/scripts.ts), route.lua keeps this memo between calls; emptied past a few lines (a router has one
-- per unit: bytes, tokens).
local knownParameters, knownParameterLines = {}, 0
local function parametersOf(line)
  local p = knownParameters[line]
  if p then return p end
  local n1, n2, n3, n4, n5, n6, n7, n8, n9, n10, n11 = string.match(line, PARAMETERS_LINE)
  p = {
    bytesPerToken = tonumber(n1), prefillMsPerToken = tonumber(n2), prefillWorkWeight = tonumber(n3),
    queueMsPerRequest = tonumber(n4), minMatchBlocks = tonumber(n5), saturationInflight = tonumber(n6),
    spreadAbs = tonumber(n7), spreadRel = tonumber(n8), coldLoadFactor = tonumber(n9), engineWaitingMs = tonumber(n10),
    kvFullMs = tonumber(n11),
  }
  if knownParameterLines >= 8 then knownParameters, knownParameterLines = {}, 0 end
  knownParameters[line] = p
  knownParameterLines = knownParameterLines + 1
  return p
end

-- The rule's entry point (rules/README.md): parses the argument, ranks the participants, evaluates.
-- Detail: the reason, '1' when the valve was lifted, else '0', the packed cost lines when the argument
-- asks for them, else '' (the codec recomputes them: rules/cost.ts), and for a cold placement whose lines
-- the codec recomputes, the eligible candidates in the order it tried them (each index in 3 six-bit
-- characters from '0'), else ''; saturated = the valve was lifted (every participant at its in-flight
-- limit), which lets a split pool try its next cell.
local function evaluateRule(candidates, argument)
  local parametersEnd = string.find(argument, '\n', 1, true)
  local p = parametersOf(string.sub(argument, 1, parametersEnd - 1))
  local textBytes, blockSizeBytes, maxTokens, linesWanted, rankStart = string.match(argument, REQUEST_LINE, parametersEnd + 1)
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
