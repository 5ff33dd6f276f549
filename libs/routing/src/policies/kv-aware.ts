/**
 * `kvaware` — route by KV-cache pressure, the engines' own view (the idea of the seed mini-llm-d):
 * a request needs KV for its prompt and for what it may generate, and a backend can take it without
 * queueing or preempting only if that much of its KV is free.
 *
 *   demandTokens(r) = ceil(textBytes / bytesPerToken) + (maxTokens ?? defaultMaxTokens)
 *   freeTokens(c)   = kvCapacityTokens · (1 − kvUsage) − pendingPrefillTokens(c)
 *                     (prompts sent there that have not started: their KV is not in kvUsage yet)
 *
 * With no capacity reported, freeTokens is read as a fraction of an assumed capacity
 * (`assumedCapacityTokens`), so backends still rank by usage.
 *
 * Decision, in order (a candidate's engine state may be unknown: never polled, stale or unhealthy
 * poller data is passed as null, an engine without a KV usage figure counts as unknown, and unknown is
 * not idle):
 * 1. Candidates whose free KV fits the demand: the shortest engine queue (`waiting`), then the tightest
 *    fit (least free KV left after the request: keeps room for large requests elsewhere), then the
 *    fewest in flight, then configuration order. Reason `kv-fit`.
 * 2. Else candidates whose state is unknown: the fewest in flight. Reason `kv-unknown`.
 * 3. Else (every known backend is short of KV): the most free KV, then the shortest queue. Reason
 *    `kv-pressure`.
 *
 * Parameters: KV_AWARE_PARAMS below.
 * Score: the candidate's tier (0 fits, 1 unknown, 2 short of KV), lower is better, [0, 2];
 * parts: { demandTokens, freeTokens, waiting } (free and waiting −1 when unknown).
 * Reasons: `kv-fit`, `kv-unknown`, `kv-pressure`.
 */

import { unitsPerToken } from '../prefix/prefill-estimate';
import type { Candidate, RoutingPolicy, RoutingRequest } from '../types';
import { candidateScore } from './candidate-score';
import { defaultsOf, resolveParams, type ParamsOf, type ParamTable } from './policy-params';

export const KV_AWARE_PARAMS = {
  bytesPerToken: { default: 4, min: 0, exclusiveMin: true, unit: 'bytes', doc: 'routing-text bytes per engine token' },
  defaultMaxTokens: {
    default: 256,
    min: 0,
    integer: true,
    unit: 'tokens',
    doc: 'generation budget assumed when a request sets no max_tokens',
    configKey: 'kvawareDefaultMaxTokens',
  },
  assumedCapacityTokens: {
    default: 65_536,
    min: 1,
    integer: true,
    unit: 'tokens',
    doc: 'KV capacity assumed for an engine whose metrics report none',
    configKey: 'kvawareAssumedCapacityTokens',
  },
} as const satisfies ParamTable;

export type KvAwareParams = ParamsOf<typeof KV_AWARE_PARAMS>;
export const DEFAULT_KV_AWARE_PARAMS: KvAwareParams = defaultsOf(KV_AWARE_PARAMS);

const enum Tier {
  Fits = 0,
  Unknown = 1,
  Short = 2,
}

interface Assessment {
  readonly tier: Tier;
  /** Free KV tokens after this request would be placed; NaN when unknown. */
  readonly leftTokens: number;
  readonly freeTokens: number;
  readonly waiting: number;
}

export function kvDemandTokens(request: RoutingRequest, p: KvAwareParams): number {
  return (
    Math.ceil(request.textBytes / unitsPerToken(request, p.bytesPerToken)) + (request.maxTokens ?? p.defaultMaxTokens)
  );
}

function assess(candidate: Candidate, demandTokens: number, p: KvAwareParams): Assessment {
  const engine = candidate.engine;
  // Without a usage figure the KV is unknown, even if the queue is known.
  if (engine === undefined || engine === null || engine.kvUsage === null)
    return { tier: Tier.Unknown, leftTokens: Number.NaN, freeTokens: -1, waiting: engine?.waiting ?? -1 };
  const capacity = engine.kvCapacityTokens ?? p.assumedCapacityTokens;
  const usage = Math.min(1, Math.max(0, engine.kvUsage));
  const freeTokens = capacity * (1 - usage) - candidate.pendingPrefillTokens;
  const leftTokens = freeTokens - demandTokens;
  return { tier: leftTokens >= 0 ? Tier.Fits : Tier.Short, leftTokens, freeTokens, waiting: engine.waiting };
}

/** Negative when a ranks before b. Within a tier, as the file comment says. */
function compare(a: Candidate, b: Candidate, x: Assessment, y: Assessment): number {
  if (x.tier !== y.tier) return x.tier - y.tier;
  switch (x.tier) {
    case Tier.Fits:
      return x.waiting - y.waiting || x.leftTokens - y.leftTokens || a.inflight - b.inflight;
    case Tier.Unknown:
      return a.inflight - b.inflight;
    default:
      return y.freeTokens - x.freeTokens || x.waiting - y.waiting || a.inflight - b.inflight;
  }
}

export function createKvAwarePolicy(params: Partial<KvAwareParams> = {}): RoutingPolicy {
  const p = resolveParams(KV_AWARE_PARAMS, params);
  return {
    name: 'kvaware',
    scoreDirection:
      'lower is better: tier 0 (free KV fits the request), 1 (engine state unknown), 2 (short of KV), [0, 2]',
    usesPrefixMatch: false,
    recordsOwnership: 'at-routing',
    choose(request, candidates) {
      const demandTokens = kvDemandTokens(request, p);
      const assessments = candidates.map((candidate) => assess(candidate, demandTokens, p));
      let best = -1;
      for (let index = 0; index < candidates.length; index++) {
        // Strictly better only: ties keep the earlier candidate (configuration order).
        if (
          best < 0 ||
          compare(
            candidates[index] as Candidate,
            candidates[best] as Candidate,
            assessments[index] as Assessment,
            assessments[best] as Assessment,
          ) < 0
        )
          best = index;
      }
      const chosen = candidates[best];
      const assessment = assessments[best];
      if (chosen === undefined || assessment === undefined) return { kind: 'rejected', reason: 'no-eligible-backend' };
      const scores = candidates.map((candidate, index) => {
        const a = assessments[index] as Assessment;
        return candidateScore(candidate, a.tier, {
          parts: { demandTokens, freeTokens: Math.round(a.freeTokens), waiting: a.waiting },
        });
      });
      const reason =
        assessment.tier === Tier.Fits ? 'kv-fit' : assessment.tier === Tier.Unknown ? 'kv-unknown' : 'kv-pressure';
      return { kind: 'routed', backendId: chosen.backend.id, reason, scores };
    },
  };
}
