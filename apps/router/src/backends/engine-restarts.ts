import type { FastifyBaseLogger } from 'fastify';
import type { BackendId, RoutingStateStore } from '@kvroute/routing';
import type { BackendRegistry } from './backend-registry';
import type { RestartListener } from './engine-state-view';

export interface RestartForgetterDeps {
  readonly registry: Pick<BackendRegistry, 'ofEngine' | 'modelsOf' | 'models'>;
  readonly state: Pick<RoutingStateStore, 'forgetBackend'>;
  /** `RouterMetrics.recordBackendRestart`. */
  readonly recordRestart: (backendId: BackendId) => void;
  readonly logger?: FastifyBaseLogger | undefined;
}

/**
 * What a replica does when the health poller publishes that a backend's engine restarted
 * (`EngineStateView.followRestarts`, once per published restart): its KV cache is empty, so what the
 * backend was believed to hold is forgotten, in every pool this replica routes it in (its models, or
 * every pool while they are not known yet), with the forget a removal uses
 * (`RoutingStateStore.forgetBackend`). Until then the index keeps predicting hits the engine no
 * longer has (`overpredicted` in `kvroute_router_prefix_predictions_total`).
 *
 * Every replica does it; it is idempotent and cheap: one small write per pool (a forget mark in Redis,
 * which hides the backend's entries recorded at or before it, or dropping the backend's entries from
 * local state). The mark is the store's clock when the replica handles the restart, not the published
 * restart time (the store's `forgetBackend` takes none): later than the restart, so everything the old
 * engine was believed to hold is hidden; what another replica recorded on the new engine in between
 * (milliseconds with pub/sub) is forgotten too, and learnt again. Backends this replica does not route
 * are ignored.
 */
export function createRestartForgetter(deps: RestartForgetterDeps): RestartListener {
  return (backendId, restartedAtMs) => {
    // The poller reports the engine (its URL): every data-parallel rank of it restarted with it.
    const backends = deps.registry.ofEngine(backendId);
    if (backends.length === 0) return;
    deps.recordRestart(backendId);
    for (const { id } of backends) {
      const known = deps.registry.modelsOf(id);
      const pools = known.length > 0 ? known : deps.registry.models();
      deps.logger?.info(
        { backend: id, restartedAtMs, pools: pools.length },
        'backend engine restarted: forgetting what it was believed to cache',
      );
      for (const pool of pools) {
        deps.state
          .forgetBackend(pool, id)
          .catch((error: unknown) =>
            deps.logger?.warn(
              { backend: id, pool, err: error },
              'could not forget what a restarted backend was believed to cache',
            ),
          );
      }
    }
  };
}
