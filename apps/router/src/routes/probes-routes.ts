import { buildInfo } from '@kvroute/platform';
import type { FastifyInstance } from 'fastify';
import type { BackendRegistry } from '../backends/backend-registry';
import type { CacheView } from '../backends/cache-views';

/**
 * `GET /healthz`: the process is alive. `GET /readyz`: it can route: not shutting down, and at least one
 * backend serves a model and has a closed (or probing) circuit. A load balancer uses readyz: from
 * SIGTERM on it answers 503 while the replica still serves for its drain delay, which is how the
 * balancer learns to send new connections elsewhere. At start it stays 503 until a backend has told its
 * models (asked again within a fraction of a second of the backends listening); it does not wait
 * for every backend, since one that never comes up would keep the whole replica out of the balancer.
 * `modelsPendingBackends` names those not heard from yet; `modelsPending` gives each one's age and whether it
 * still makes unknown models answer 503 (within modelsPendingMaxMs of being added). Its body also says, per backend, whether the
 * router's picture of its cache is checked by its responses (`feedback`: `cached-tokens` | `open-loop`), and where
 * that picture comes from (`cacheView`: `events` | `closed-loop` | `open-loop`, backends/cache-views.ts).
 * `GET /version`: which kvroute build answers (`{ version, commit }`).
 */
export async function probesRoutes(
  app: FastifyInstance,
  options: {
    registry: BackendRegistry;
    isShuttingDown: () => boolean;
    reportsCachedTokens: (backendId: string) => boolean;
    cacheViewOf: (backendId: string) => CacheView;
  },
): Promise<void> {
  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/version', async () => buildInfo());
  app.get('/readyz', async (_request, reply) => {
    const usable = options.registry
      .models()
      .flatMap((model) => options.registry.poolFor(model))
      .filter((backend) => backend.breaker.isAvailable());
    const ready = !options.isShuttingDown() && usable.length > 0;
    const pending = options.registry.pendingModelsReport();
    return reply.code(ready ? 200 : 503).send({
      status: ready ? 'ready' : 'not-ready',
      shuttingDown: options.isShuttingDown(),
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
        options.registry.backends.map((backend) => [
          backend.id,
          options.reportsCachedTokens(backend.id) ? 'cached-tokens' : 'open-loop',
        ]),
      ),
      // What the router's picture of each backend's cache comes from: the engine's KV events (followed
      // by the poller's indexer), its responses' cached tokens (closed loop), or nothing (open loop).
      cacheView: Object.fromEntries(
        options.registry.backends.map((backend) => [backend.id, options.cacheViewOf(backend.id)]),
      ),
    });
  });
}
