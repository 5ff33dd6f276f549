import type { FastifyInstance } from 'fastify';
import type { RouterMetrics } from '../router-metrics';

/** `GET /metrics`: the router's own Prometheus metrics. */
export async function metricsRoutes(app: FastifyInstance, options: { metrics: RouterMetrics }): Promise<void> {
  app.get('/metrics', async (_request, reply) =>
    reply.type(options.metrics.registry.contentType).send(await options.metrics.registry.metrics()),
  );
}
