import { request as undiciRequest } from 'undici';
import type { Backend } from '../backends/backend-registry';
import type { UpstreamPools } from '../proxy/upstream-pool';

/**
 * In open mode, a stored response the owner map does not know (stored before this fleet shared its map,
 * by a replica that never said, or straight on an engine) is looked for on the backends
 * (pipeline/stored-response.ts): `GET /v1/responses/{id}` to each engine, at most
 * `maxParallel` at once, all within `timeoutMs`; the first to answer 200 holds it, and the others' probes
 * are abandoned. Only in open mode: with tenants, an id the caller's scope does not own is not the
 * caller's to find (another tenant's response would answer 200 on its engine).
 */
export interface StoredResponseSearch {
  readonly upstreams: UpstreamPools;
  /** Probes in flight at once. */
  readonly maxParallel: number;
  /** The whole search's bound, ms: past it, the id is not found. */
  readonly timeoutMs: number;
}

export const STORED_RESPONSE_SEARCH_MAX_PARALLEL = 8;
export const STORED_RESPONSE_SEARCH_TIMEOUT_MS = 2_000;

/** The backend (one per engine: data-parallel ranks share a store) answering 200 for `id` first; null: none in time. */
export async function searchStoredResponse(
  search: StoredResponseSearch,
  backends: readonly Backend[],
  id: string,
): Promise<Backend | null> {
  const engines = new Map<string, Backend>();
  for (const backend of backends) if (!engines.has(backend.engineId)) engines.set(backend.engineId, backend);
  const candidates = [...engines.values()];
  const stop = new AbortController();
  const timer = setTimeout(() => stop.abort(), search.timeoutMs);
  let next = 0;
  let found: Backend | null = null;
  const worker = async (): Promise<void> => {
    while (found === null && !stop.signal.aborted && next < candidates.length) {
      const backend = candidates[next++] as Backend;
      if (await holds(search.upstreams, backend, id, stop.signal)) {
        found ??= backend;
        stop.abort();
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.min(search.maxParallel, candidates.length) }, worker));
  } finally {
    clearTimeout(timer);
  }
  return found;
}

/** Whether `backend` answers 200 for stored response `id`; any failure (refused, aborted, timed out) is no. */
async function holds(upstreams: UpstreamPools, backend: Backend, id: string, signal: AbortSignal): Promise<boolean> {
  const authorization = upstreams.authorizationOf(backend);
  try {
    const response = await undiciRequest(
      `${backend.origin}${backend.basePath}/v1/responses/${encodeURIComponent(id)}`,
      {
        dispatcher: upstreams.for(backend),
        signal,
        ...(authorization === null ? {} : { headers: { authorization } }),
      },
    );
    await response.body.dump();
    return response.statusCode === 200;
  } catch {
    return false;
  }
}
