import type { EngineMetrics } from './engine-metrics';

/**
 * Whether the engine behind one backend restarted between two scrapes of it: a new process has an empty
 * KV cache, so every prefix the old one held is gone. The signs, in order:
 *
 * 1. **Start time.** When both scrapes read the process start time (`engineStartedAtMs`), it decides
 *    alone: a restart if and only if it changed. A counter that goes down under an unchanged start time
 *    is a series that went away (a label changed), not a new process.
 * 2. **Engine kind.** Another engine kind answers at that address (the engine was replaced).
 * 3. **A counter went down.** Counters start at 0 with the process and only grow, so any of them lower
 *    than at the previous scrape means a new process: prefix-cache queries and hits (when both scrapes
 *    count them in the same unit), generation tokens, preemptions.
 *
 * What it misses: without a start time (vLLM V0, SGLang, llama.cpp, vLLM with several API servers), a
 * restart after which the new process served more, before the next scrape, than the old one had in
 * its whole life (its counters are already past the old values). The previous scrape is the last one
 * that read `/metrics`, however long ago: scrapes that failed in between (the engine was down) do not
 * hide the restart.
 */
export type EngineRestartSign = 'start-time-changed' | 'engine-changed' | 'counter-went-down';

/** The counters read for sign 3. */
export const RESTART_COUNTERS = [
  'prefixCacheQueriesTotal',
  'prefixCacheHitsTotal',
  'generationTokensTotal',
  'preemptionsTotal',
] as const;
export type RestartCounter = (typeof RESTART_COUNTERS)[number];

export type EngineRestart =
  | { readonly sign: 'start-time-changed'; readonly previousStartedAtMs: number; readonly startedAtMs: number }
  | { readonly sign: 'engine-changed' }
  | {
      readonly sign: 'counter-went-down';
      readonly counter: RestartCounter;
      readonly previous: number;
      readonly current: number;
    };

/** The restart between `previous` and `current` (two scrapes of one backend, in that order), or null if none is visible. */
export function detectEngineRestart(previous: EngineMetrics, current: EngineMetrics): EngineRestart | null {
  const before = previous.engineStartedAtMs;
  const now = current.engineStartedAtMs;
  if (before !== null && now !== null)
    return before === now ? null : { sign: 'start-time-changed', previousStartedAtMs: before, startedAtMs: now };
  if (previous.engine !== current.engine) return { sign: 'engine-changed' };
  const sameUnit = previous.prefixCacheCounterUnit === current.prefixCacheCounterUnit;
  for (const counter of RESTART_COUNTERS) {
    if (!sameUnit && (counter === 'prefixCacheQueriesTotal' || counter === 'prefixCacheHitsTotal')) continue;
    const was = previous[counter];
    const is = current[counter];
    if (was !== null && is !== null && is < was)
      return { sign: 'counter-went-down', counter, previous: was, current: is };
  }
  return null;
}
