import { buildInfo } from '@kvroute/platform';
import type { FastifyInstance } from 'fastify';
import type { ReadinessReport } from './readiness';

/**
 * `GET /healthz`: the process is alive. `GET /readyz`: it can route (routes/readiness.ts), 200 or 503;
 * its body says whether the replica is degraded (routing on local state). `detail: 'status'` (the public
 * port) answers that and nothing more, so an L4 balancer can check it without learning backend
 * addresses; `detail: 'full'` (the ops port) adds why it is degraded and the backends as this replica
 * sees them. `GET /version`: which kvroute build answers (`{ version, commit }`).
 */
export async function probesRoutes(
  app: FastifyInstance,
  options: { readiness: () => ReadinessReport; detail: 'status' | 'full' },
): Promise<void> {
  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/version', async () => buildInfo());
  app.get('/readyz', async (_request, reply) => {
    const report = options.readiness();
    return reply.code(report.ready ? 200 : 503).send(options.detail === 'full' ? report.detail : report.status);
  });
}
