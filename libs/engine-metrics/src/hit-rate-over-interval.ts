import type { EngineMetrics } from './engine-metrics';

/**
 * The prefix-cache hit rate between two scrapes of one engine, in [0, 1]:
 * - when both scrapes have the prefix-cache counters (same engine kind, same unit):
 *   Δhits / Δqueries; null when either counter went down (the engine restarted: counters reset) or no
 *   query was made in between (no information about the interval);
 * - otherwise (the engine has no counters: vLLM V0, llama.cpp): the current scrape's hit-rate gauge,
 *   whatever its own window is (V0: cumulative since start), or null;
 * - null when only one of the two scrapes has counters (the backend changed engine: a reset too).
 */
export function hitRateOverInterval(previous: EngineMetrics, current: EngineMetrics): number | null {
  const before = countersOf(previous);
  const now = countersOf(current);
  if (now === null) return before === null ? current.prefixCacheHitRate : null;
  if (
    before === null ||
    previous.engine !== current.engine ||
    previous.prefixCacheCounterUnit !== current.prefixCacheCounterUnit
  )
    return null;
  const queries = now.queries - before.queries;
  const hits = now.hits - before.hits;
  if (queries < 0 || hits < 0 || queries === 0) return null;
  return Math.min(1, hits / queries);
}

function countersOf(metrics: EngineMetrics): { queries: number; hits: number } | null {
  const { prefixCacheQueriesTotal: queries, prefixCacheHitsTotal: hits } = metrics;
  return queries === null || hits === null ? null : { queries, hits };
}
