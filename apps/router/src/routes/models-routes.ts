import type { FastifyInstance } from 'fastify';
import type { BackendRegistry } from '../backends/backend-registry';
import { unknownModelError } from '../pipeline/route';

/**
 * `GET /v1/models`: the union of the models every pool serves, in the OpenAI list shape; and
 * `GET /v1/models/{id}`: one of them as an OpenAI model object, or a 404 in the OpenAI error shape
 * (`ROUTER_ERR_MODEL_NOT_FOUND`) for a model no backend serves (503 `ROUTER_ERR_MODELS_PENDING` while
 * some backend has not yet told its models, within modelsPendingMaxMs of its being added). Answered by the router from what it
 * knows (vLLM has no such route; the OpenAI clients' `models.retrieve` calls it). Model ids may hold
 * `/` (`org/name`), so the id is the rest of the path.
 */
export async function modelsRoutes(
  app: FastifyInstance,
  options: { registry: BackendRegistry; createdUnixSeconds: number },
): Promise<void> {
  const modelObject = (id: string) => ({
    id,
    object: 'model',
    created: options.createdUnixSeconds,
    owned_by: 'kvroute',
    backends: options.registry.poolFor(id).map((backend) => backend.id),
  });
  app.get('/v1/models', async () => ({ object: 'list', data: options.registry.models().map(modelObject) }));
  app.get<{ Params: { '*': string } }>('/v1/models/*', async (request) => {
    const id = request.params['*'];
    // Listed models only (an undrained backend serves it); else as for a request: 503 while a backend may still report it.
    if (options.registry.poolFor(id).length === 0) throw unknownModelError(options.registry, id);
    return modelObject(id);
  });
}
