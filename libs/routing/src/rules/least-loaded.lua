-- The least-loaded rule (rules/least-loaded.ts, the `leastloaded` policy): the participant with the
-- fewest leases in flight; ties go to the earlier one (configuration order), as indexOfLeastLoaded in
-- libs/routing/src/policies/least-loaded.ts.
--
-- argument: the lease's prefill tokens (the whole prompt: this rule reads no match depths).
-- Contract of evaluateRule: rules/README.md.
local function evaluateRule(candidates, argument)
  local best, bestInflight, inflight = 1, math.huge, candidates.inflight
  for j = 1, candidates.count do
    if inflight[j] < bestInflight then
      best, bestInflight = j, inflight[j]
    end
  end
  return best, tonumber(argument), false, {}
end
