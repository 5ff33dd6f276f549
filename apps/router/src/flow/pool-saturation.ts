import type { EngineLoad } from '@kvroute/routing';

/**
 * Whether a pool is saturated, from what its engines report (the health poller's waiting requests and
 * KV-cache usage), as llm-d's utilization detector judges it: each backend's score is
 * max(waiting ÷ waitingThreshold, KV usage ÷ kvUsageThreshold), and the pool is saturated when the mean
 * score over the backends with a fresh report reaches 1. Backends without one do not count; a pool with
 * none is not saturated (fail open: without a poller only the in-flight capacity holds requests back).
 */
export interface SaturationThresholds {
  /** Waiting requests per backend that make it saturated (> 0). */
  readonly waiting: number;
  /** KV-cache usage, 0–1, that makes it saturated (> 0). */
  readonly kvUsage: number;
}

/** The mean saturation score of the loads given (1 = saturated; 0 when none is known). */
export function poolSaturationScore(loads: readonly (EngineLoad | null)[], thresholds: SaturationThresholds): number {
  let sum = 0;
  let known = 0;
  for (const load of loads) {
    if (load === null) continue;
    known++;
    sum += Math.max(load.waiting / thresholds.waiting, (load.kvUsage ?? 0) / thresholds.kvUsage);
  }
  return known === 0 ? 0 : sum / known;
}
