import type { BackendRegistry } from '../backends/backend-registry';
import type { CacheView } from '../backends/cache-views';

/** What readiness reads of the replica. */
export interface ReadinessSources {
  readonly registry: BackendRegistry;
  readonly isShuttingDown: () => boolean;
  /** Whether the public listener is up: the ops listener opens first, and must not call the replica ready before. */
  readonly isListening: () => boolean;
  readonly reportsCachedTokens: (backendId: string) => boolean;
  readonly cacheViewOf: (backendId: string) => CacheView;
  /**
   * Why the replica routes on less than its shared state now (state-wiring.ts `degradedReasons`): empty
   * when it is not degraded. Degraded is still ready: routing goes on, on this replica's local view.
   */
  readonly degradedReasons: () => readonly string[];
}

/** One readiness reading: what both /readyz answers are made of. */
export interface ReadinessReport {
  /** 200 when true, 503 otherwise. */
  readonly ready: boolean;
  /** The public port's body: a balancer needs no more (no backend address, nothing about the fleet). */
  readonly status: { readonly status: 'ready' | 'not-ready'; readonly degraded: boolean };
  /** The ops port's body: the status, then why degraded, and the backends as this replica sees them. */
  readonly detail: Readonly<Record<string, unknown>>;
}

/**
 * Ready: listening on the public port, not shutting down, and at least one backend serves a model and has a closed (or probing)
 * circuit. A balancer reads this: from SIGTERM on it is 503 while the replica still serves for its
 * drain delay. At start it stays 503 until a backend has told its models; it does not wait for every
 * backend, since one that never comes up would keep the whole replica out of the balancer.
 * `modelsPendingBackends` names those not heard from yet; `modelsPending` gives each one's age and
 * whether it still makes unknown models answer 503 (within modelsPendingMaxMs of being added). The
 * detail also says, per backend, whether the router's picture of its cache is checked by its responses
 * (`feedback`: `cached-tokens` | `open-loop`), and where that picture comes from (`cacheView`: `events`
 * | `closed-loop` | `open-loop`, backends/cache-views.ts).
 */
export function readinessReport(sources: ReadinessSources): ReadinessReport {
  const { registry } = sources;
  const usable = registry
    .models()
    .flatMap((model) => registry.poolFor(model))
    .filter((backend) => backend.breaker.isAvailable());
  const shuttingDown = sources.isShuttingDown();
  const ready = sources.isListening() && !shuttingDown && usable.length > 0;
  const reasons = sources.degradedReasons();
  const status = { status: ready ? 'ready' : 'not-ready', degraded: reasons.length > 0 } as const;
  const pending = registry.pendingModelsReport();
  const detail = {
    ...status,
    reasons,
    shuttingDown,
    usableBackends: [...new Set(usable.map((backend) => backend.id))],
    // Backends that have not yet answered GET /v1/models (being retried): models they serve get 503 + Retry-After meanwhile.
    modelsPendingBackends: pending.map((entry) => entry.backend.id),
    // Their ages (ms since added) and whether unknown models still get 503 because of them (for
    // modelsPendingMaxMs after they were added, undrained only; 404 after that, retries go on).
    modelsPending: pending.map((entry) => ({
      backend: entry.backend.id,
      ageMs: Math.round(entry.ageMs),
      holdsUnknownModels: entry.holdsUnknownModels,
    })),
    // How the router learns what each backend's cache holds: from every response's cached tokens
    // (closed loop), or not at all (its engine does not report them: predictions go unchecked).
    feedback: Object.fromEntries(
      registry.backends.map((backend) => [
        backend.id,
        sources.reportsCachedTokens(backend.id) ? 'cached-tokens' : 'open-loop',
      ]),
    ),
    // What the router's picture of each backend's cache comes from: the engine's KV events (followed
    // by the poller's indexer), its responses' cached tokens (closed loop), or nothing (open loop).
    cacheView: Object.fromEntries(registry.backends.map((backend) => [backend.id, sources.cacheViewOf(backend.id)])),
    // Each backend's prefill/decode role (both: whole requests or either leg of a disaggregated one).
    roles: Object.fromEntries(registry.backends.map((backend) => [backend.id, backend.role])),
  };
  return { ready, status, detail };
}
