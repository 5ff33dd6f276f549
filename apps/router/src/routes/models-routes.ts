import type { FastifyInstance } from 'fastify';
import type { BackendRegistry } from '../backends/backend-registry';
import { RouterError } from '../errors';

/**
 * `GET /v1/models`: the union of the models every pool serves, in the OpenAI list shape; and
 * `GET /v1/models/{id}`: one of them as an OpenAI model object, or a 404 in the OpenAI error shape
 * (`ROUTER_ERR_MODEL_NOT_FOUND`) for a model no backend serves (503 `ROUTER_ERR_MODELS_PENDING` while
 * some backend has not yet told its models, within modelsPendingMaxMs of its being added). Answered by the router from what it
 * knows (vLLM has no such route; the OpenAI clients' `models.retrieve` calls it). Model ids may hold
 * `/` (`org/name`), so the id is the rest of the path.
 */
export async function modelsRoutes(app: FastifyInstance, options: { registry: BackendRegistry; createdUnixSeconds: number }): Promise<void> {
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
    if (id === '' || !options.registry.models().includes(id)) {
      // As for a request (pipeline/route.ts poolOf): not a 404 while a backend may still report it.
      if (id !== '' && options.registry.modelsPending()) {
        throw new RouterError('ROUTER_ERR_MODELS_PENDING', `No backend has reported model \`${id.slice(0, 256)}\` yet; some backends have not yet told their models. Retry shortly.`, {
          param: 'model',
          retryAfterSeconds: 1,
        });
      }
      throw new RouterError('ROUTER_ERR_MODEL_NOT_FOUND', `The model \`${id.slice(0, 256)}\` does not exist.`, { param: 'model' });
    }
    return modelObject(id);
  });
}
