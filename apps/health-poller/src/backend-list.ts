import type { EngineKind } from '@kvroute/engine-metrics';
import type { BackendEntry } from '@kvroute/redis-store';
import type { PollerBackendConfig, PollerConfig } from './config';
import type { KvEventsSource } from './kv-events/endpoints';

/** A backend the poller scrapes: one job scheduler each, its id the scheduler id. */
export interface PolledBackend {
  /** The id routers know it by: configured, else the URL's host:port (as the router's `backendIdOf`). */
  readonly id: string;
  readonly url: string;
  /** Configured engine kind; null = told from /metrics. */
  readonly engine: EngineKind | null;
  /** The models it serves, when known (the pool of its KV events when it is one). */
  readonly models?: readonly string[] | undefined;
  /** Its KV-event streams, when configured (kv-events/endpoints.ts). */
  readonly kvEvents?: KvEventsSource | undefined;
  /** Its data-parallel ranks, from the shared set (the routers' `dataParallel`). */
  readonly dataParallel?: { readonly size: number; readonly startRank: number } | undefined;
}

/** The configured backends, ids defaulted as the routers default them. Throws on a duplicate id. */
export function configuredBackends(entries: PollerConfig['backends']): PolledBackend[] {
  const seen = new Set<string>();
  return entries.map((entry) => {
    const id = ('id' in entry ? entry.id : undefined) ?? new URL(entry.url).host;
    if (seen.has(id)) throw new Error(`duplicate backend id "${id}" (give backends distinct ids)`);
    seen.add(id);
    // A bare URL entry has none of the options.
    const options: Partial<PollerBackendConfig> = entry;
    return {
      id,
      url: entry.url,
      engine: options.engine ?? null,
      models: options.models,
      kvEvents: options.kvEvents,
    };
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
  for (const entry of shared) {
    const known = byId.get(entry.id);
    byId.set(entry.id, {
      id: entry.id,
      url: entry.url,
      engine: known?.engine ?? null,
      models: entry.models ?? known?.models,
      // The poller's own configuration of a backend's events wins over what the fleet's set says.
      kvEvents: known?.kvEvents ?? entry.kvEvents,
      dataParallel: entry.dataParallel,
    });
  }
  return [...byId.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}
