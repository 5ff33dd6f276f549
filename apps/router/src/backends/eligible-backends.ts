import type { BackendId, EngineLoad } from '@kvroute/routing';
import type { Backend } from './backend-registry';
import type { EngineStateView } from './engine-state-view';

export interface Eligibility {
  /** The backends a policy may choose from, in configuration order. */
  readonly eligible: readonly Backend[];
  /**
   * Every backend with a closed circuit was reported unhealthy by the poller, so the router ignored
   * the poller rather than refuse the request: the poller may be the one that is wrong.
   */
  readonly failedOpen: boolean;
  /** The engines' own load, for the backends whose state is fresh and healthy. */
  readonly engine: ReadonlyMap<BackendId, EngineLoad>;
}

/**
 * Which backends a try may use: not already failed by this request, circuit not open, and not
 * reported unhealthy by the health poller (a backend of unknown state stays eligible: no poller, or a
 * stale one, must not take backends out). If the poller would leave nothing, fail open to the
 * breaker's view.
 */
export function eligibleBackends(
  backends: readonly Backend[],
  excluded: ReadonlySet<BackendId>,
  view: EngineStateView | null,
): Eligibility {
  const available = backends.filter((backend) => !excluded.has(backend.id) && backend.breaker.isAvailable());
  const engine = new Map<BackendId, EngineLoad>();
  if (view === null) return { eligible: available, failedOpen: false, engine };
  const healthy: Backend[] = [];
  for (const backend of available) {
    // The poller watches the engine (its URL); a data-parallel rank shares its health, not its load.
    const verdict = view.verdict(backend.engineId);
    if (verdict.kind === 'unhealthy') continue;
    healthy.push(backend);
    if (verdict.kind === 'healthy' && verdict.load !== null && backend.dataParallelRank === null)
      engine.set(backend.id, verdict.load);
  }
  if (healthy.length === 0 && available.length > 0) return { eligible: available, failedOpen: true, engine };
  return { eligible: healthy, failedOpen: false, engine };
}
