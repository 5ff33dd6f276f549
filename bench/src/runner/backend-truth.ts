/**
 * Backend-side truth for a run: each backend's own prefix-cache counters (`vllm:prefix_cache_hits_total`
 * and `…_queries_total`, or the SGLang / llama.cpp equivalents the engine-metrics normaliser knows),
 * read before and after, as deltas. This is what the engines say they served from cache, independent
 * of what the client's `usage` reports.
 */
import { parseEngineMetrics } from '@kvroute/engine-metrics';
import type { Agent } from 'undici';
import { request } from 'undici';
import type { BackendTruth } from '../report';

export interface PrefixCounters {
  readonly backend: string;
  /** null when the backend could not be scraped or does not count prefix-cache tokens. */
  readonly hits: number | null;
  readonly queries: number | null;
}

export async function readPrefixCounters(agent: Agent, backendUrls: readonly string[]): Promise<PrefixCounters[]> {
  return Promise.all(
    backendUrls.map(async (url): Promise<PrefixCounters> => {
      try {
        const response = await request(new URL('/metrics', url), {
          dispatcher: agent,
          headersTimeout: 5_000,
          bodyTimeout: 5_000,
        });
        const text = await response.body.text();
        if (response.statusCode !== 200) return { backend: url, hits: null, queries: null };
        const metrics = parseEngineMetrics(text);
        return { backend: url, hits: metrics.prefixCacheHitsTotal, queries: metrics.prefixCacheQueriesTotal };
      } catch {
        return { backend: url, hits: null, queries: null };
      }
    }),
  );
}

/** Per backend: after − before; backends missing a counter on either side are left out. */
export function prefixCounterDeltas(
  before: readonly PrefixCounters[],
  after: readonly PrefixCounters[],
): BackendTruth[] {
  const truths: BackendTruth[] = [];
  for (const end of after) {
    const begin = before.find((counters) => counters.backend === end.backend);
    if (!begin || begin.hits === null || begin.queries === null || end.hits === null || end.queries === null) continue;
    // A counter that went down means the engine restarted meanwhile: count from zero.
    const hits = end.hits >= begin.hits ? end.hits - begin.hits : end.hits;
    const queries = end.queries >= begin.queries ? end.queries - begin.queries : end.queries;
    truths.push({ backend: end.backend, prefixCacheHitsDelta: hits, prefixCacheQueriesDelta: queries });
  }
  return truths;
}
