/**
 * `session` — sticky sessions without a session table: the session key (`X-Session-Id`, else the
 * body's `user`) is placed by bounded-load rendezvous hashing (`bounded-load-hash.ts`). Every turn
 * of a conversation, on every router replica, prefers the same backend, which therefore holds the
 * conversation's KV prefix; a backend above its bound
 * `ceil(loadFactor · (totalInflight + 1) · weight / totalWeight)` passes the turn to the key's next
 * preference. Requests without a key go to the least-loaded backend. Blind to prefix sharing
 * between sessions (a common system prompt is not a reason to co-locate).
 *
 * Parameters: SESSION_PARAMS below.
 * Score: with a key, the candidate's preference rank, lower is better, [0, n−1] (parts: { bound });
 *        without a key, in-flight requests, lower is better, [0, ∞).
 * Reasons: `session-affinity` (first preference), `session-spilled` (a later one), `least-loaded` (no key).
 */

import type { RoutingPolicy } from '../types';
import { hashString53 } from '../hash/hash53';
import { boundedLoadDecision, chooseByBoundedLoadHash } from './bounded-load-hash';
import { leastLoadedDecision } from './least-loaded';
import { resolveParams, type ParamsOf, type ParamTable } from './policy-params';

export const SESSION_PARAMS = {
  loadFactor: {
    default: 1.25,
    min: 1,
    unit: '',
    doc: 'how far above its fair share a backend keeps its sessions (bounded load)',
    configKey: 'loadFactor',
  },
} as const satisfies ParamTable;

export type SessionParams = ParamsOf<typeof SESSION_PARAMS>;

export function createSessionPolicy(params: Partial<SessionParams> = {}): RoutingPolicy {
  const { loadFactor } = resolveParams(SESSION_PARAMS, params);

  return {
    name: 'session',
    scoreDirection: 'lower is better: preference rank [0, n−1] with a session key; in-flight [0, ∞) without',
    usesPrefixMatch: false,
    recordsOwnership: 'at-routing',
    choose(request, candidates) {
      if (request.sessionKey === null) return leastLoadedDecision(candidates);
      const choice = chooseByBoundedLoadHash(hashString53(request.sessionKey), candidates, loadFactor);
      return boundedLoadDecision(choice, candidates, { first: 'session-affinity', spilled: 'session-spilled' });
    },
  };
}
