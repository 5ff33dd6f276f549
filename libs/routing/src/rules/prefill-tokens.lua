-- Inlined by embed-lua.ts into each rule that has an include line for this file.
--
-- Prompt tokens a backend holding `depth` leading blocks still has to prefill: the request's unmatched
-- routing-text bytes over bytes per token, rounded up. The Lua twin of estimatePrefillTokens
-- (libs/routing/src/prefix/prefill-estimate.ts); rule-parity.int.test.ts compares the two.
local ceilOf, maxOf = math.ceil, math.max
local function prefillTokens(textBytes, blockSizeBytes, depth, bytesPerToken)
  return ceilOf(maxOf(0, textBytes - depth * blockSizeBytes) / bytesPerToken)
end
