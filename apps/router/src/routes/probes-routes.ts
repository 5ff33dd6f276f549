import type { FastifyInstance } from 'fastify';
import type { BackendRegistry } from '../backends/backend-registry';

/**
 * `GET /healthz`: the process is alive. `GET /readyz`: it can route: not shutting down, and at least one
 * backend serves a model and has a closed (or probing) circuit. A load balancer uses readyz: from
 * SIGTERM on it answers 503 while the replica still serves for its drain delay, which is how the
 * balancer learns to send new connections elsewhere.
 */
export async function probesRoutes(app: FastifyInstance, options: { registry: BackendRegistry; isShuttingDown: () => boolean }): Promise<void> {
  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (_request, reply) => {
    const usable = options.registry.models().flatMap((model) => options.registry.poolFor(model)).filter((backend) => backend.breaker.isAvailable());
    const ready = !options.isShuttingDown() && usable.length > 0;
    return reply.code(ready ? 200 : 503).send({
      status: ready ? 'ready' : 'not-ready',
      shuttingDown: options.isShuttingDown(),
      usableBackends: [...new Set(usable.map((backend) => backend.id))],
    });
  });
}
