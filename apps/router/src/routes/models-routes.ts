import type { FastifyInstance, FastifyRequest } from 'fastify';
import type { Backend, BackendRegistry } from '../backends/backend-registry';
import type { AdapterRouting } from '../lora/adapter-routing';
import { unknownModelError } from '../pipeline/route';
import type { ModelAccess } from '../tenants/model-access';

/**
 * `GET /v1/models`: the union of the models every pool serves, in the OpenAI list shape; and
 * `GET /v1/models/{id}`: one of them as an OpenAI model object, or a 404 in the OpenAI error shape
 * (`ROUTER_ERR_MODEL_NOT_FOUND`) for a model no backend serves (503 `ROUTER_ERR_MODELS_PENDING` while
 * some backend has not yet told its models, within modelsPendingMaxMs of its being added). Answered by
 * the router from what it knows (vLLM has no such route; the OpenAI clients' `models.retrieve` calls
 * it). Model ids may hold `/` (`org/name`), so the id is the rest of the path.
 *
 * A caller sees only the models it may use (tenants/model-access.ts): another is left out of the list
 * and is a 404 here, as a model that does not exist. Each model's `backends` (the ids of the backends
 * serving it) is shown to privileged keys (roles admin, bench) only: never to user keys, nor in open mode.
 */
export async function modelsRoutes(
  app: FastifyInstance,
  options: {
    registry: BackendRegistry;
    createdUnixSeconds: number;
    access: ModelAccess;
    /** LoRA adapters (their base models, the loadable ones); null: adapter-blind. */
    adapters?: AdapterRouting | null;
  },
): Promise<void> {
  const baseOf = (id: string) => options.adapters?.baseOf(id) ?? options.registry.baseModelOf(id);
  // Listed by a backend, or loadable on demand (not listed until loaded somewhere).
  const servedModels = (): string[] => {
    const loadable = options.adapters?.loader?.adapters.map((adapter) => adapter.name) ?? [];
    return [...new Set([...options.registry.models(), ...loadable])];
  };
  const modelObject = (id: string, request: FastifyRequest) => {
    // A LoRA adapter names its base model, as vLLM lists it (`parent`): its requests are served by that model's pool.
    const parent = baseOf(id);
    return {
      id,
      object: 'model',
      created: options.createdUnixSeconds,
      owned_by: 'kvroute',
      ...(parent === null || parent === id ? {} : { parent }),
      ...(isPrivileged(request) ? backendsOf(options.registry.poolFor(id)) : {}),
    };
  };
  app.get('/v1/models', async (request) => ({
    object: 'list',
    data: options.access.visible(request.identity, servedModels()).map((id) => modelObject(id, request)),
  }));
  app.get<{ Params: { '*': string } }>('/v1/models/*', async (request) => {
    const id = request.params['*'];
    // Listed models only (an undrained backend serves it); else as for a request: 503 while a backend may still report it.
    const listed = options.registry.poolFor(id).length > 0 || options.adapters?.loader?.loadable(id) !== undefined;
    if (!listed || !options.access.allows(request.identity, id)) throw unknownModelError(options.registry, id);
    return modelObject(id, request);
  });
}

function isPrivileged(request: FastifyRequest): boolean {
  const role = request.identity?.role;
  return role === 'admin' || role === 'bench';
}

/**
 * A model's backends as privileged keys see them: their ids, and for a disaggregated model (a prefill and a decode
 * backend) each one's role.
 */
function backendsOf(pool: readonly Backend[]): { backends: string[]; roles?: Record<string, string> } {
  const backends = pool.map((backend) => backend.id);
  if (pool.every((backend) => backend.role === 'both')) return { backends };
  return { backends, roles: Object.fromEntries(pool.map((backend) => [backend.id, backend.role])) };
}
