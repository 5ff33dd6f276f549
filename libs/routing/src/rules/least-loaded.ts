/**
 * The least-loaded rule's half in TypeScript: the codec of its Lua twin (least-loaded.lua, same base
 * name). The rule is `indexOfLeastLoaded` in policies/least-loaded.ts; it reads no match depths, so its
 * lease carries the whole prompt's prefill, which is its whole argument.
 */
import { estimatePrefillTokens } from '../prefix/prefill-estimate';
import type { AtomicRule, LeastLoadedOutcome, RoutingDecision } from '../types';
import { LEAST_LOADED_LUA } from './rules-lua.generated';

export function leastLoadedRule(
  explain: (outcome: LeastLoadedOutcome) => RoutingDecision,
): AtomicRule<LeastLoadedOutcome> {
  return {
    name: 'least-loaded',
    lua: LEAST_LOADED_LUA,
    readsDepths: false,
    encode: (request) => ({ argument: String(estimatePrefillTokens(request, 0)), preferred: [] }),
    decode: ({ candidates, chosen }) => ({ kind: 'least-loaded', candidates, chosen, reason: 'least-loaded' }),
    explain,
  };
}
