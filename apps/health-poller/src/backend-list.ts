import type { EngineKind } from '@kvroute/engine-metrics';
import type { BackendEntry } from '@kvroute/redis-store';
import type { PollerConfig } from './config';

/** A backend the poller scrapes: one job scheduler each, its id the scheduler id. */
export interface PolledBackend {
  /** The id routers know it by: configured, else the URL's host:port (as the router's `backendIdOf`). */
  readonly id: string;
  readonly url: string;
  /** Configured engine kind; null = told from /metrics. */
  readonly engine: EngineKind | null;
}

/** The configured backends, ids defaulted as the routers default them. Throws on a duplicate id. */
export function configuredBackends(entries: PollerConfig['backends']): PolledBackend[] {
  const seen = new Set<string>();
  return entries.map((entry) => {
    const id = ('id' in entry ? entry.id : undefined) ?? new URL(entry.url).host;
    if (seen.has(id)) throw new Error(`duplicate backend id "${id}" (give backends distinct ids)`);
    seen.add(id);
    return { id, url: entry.url, engine: ('engine' in entry ? entry.engine : undefined) ?? null };
  });
}

/**
 * What to scrape: the configured backends plus the fleet's shared set (drained backends included: they
 * still run requests), by id, sorted. Where both name an id, the shared entry's URL wins (the routers
 * send to it) and the configured engine kind is kept.
 */
export function mergeBackendLists(
  configured: readonly PolledBackend[],
  shared: readonly BackendEntry[],
): PolledBackend[] {
  const byId = new Map<string, PolledBackend>(configured.map((backend) => [backend.id, backend]));
  for (const entry of shared)
    byId.set(entry.id, { id: entry.id, url: entry.url, engine: byId.get(entry.id)?.engine ?? null });
  return [...byId.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}
