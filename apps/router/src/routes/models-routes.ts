import type { FastifyInstance } from 'fastify';
import type { BackendRegistry } from '../backends/backend-registry';

/** `GET /v1/models`: the union of the models every pool serves, in the OpenAI list shape. */
export async function modelsRoutes(app: FastifyInstance, options: { registry: BackendRegistry; createdUnixSeconds: number }): Promise<void> {
  app.get('/v1/models', async () => ({
    object: 'list',
    data: options.registry.models().map((id) => ({
      id,
      object: 'model',
      created: options.createdUnixSeconds,
      owned_by: 'kvroute',
      backends: options.registry.poolFor(id).map((backend) => backend.id),
    })),
  }));
}
