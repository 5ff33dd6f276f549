import type { FastifyInstance } from 'fastify';
import type { LoraRegistry } from '../lora/lora-registry';

export interface ModelsRoutesOptions {
  readonly servedModel: string;
  readonly maxModelLen: number;
  readonly createdUnixSeconds: number;
  /** Its LoRA adapters, listed after the served model. */
  readonly models: LoraRegistry;
}

/**
 * `GET /v1/models` in vLLM's shape (`OpenAIServingModels.show_available_models`): a card for the served model,
 * then one per LoRA adapter in load order with `root` = its path, `parent` = the model it adapts and no
 * `max_model_len` (vLLM leaves it None on adapter cards).
 */
export async function modelsRoutes(app: FastifyInstance, options: ModelsRoutesOptions): Promise<void> {
  const card = (id: string, root: string, parent: string | null, maxModelLen: number | null) => ({
    id,
    object: 'model',
    created: options.createdUnixSeconds,
    owned_by: 'vllm',
    root,
    parent,
    max_model_len: maxModelLen,
    permission: [
      {
        id: `modelperm-${id}`,
        object: 'model_permission',
        created: options.createdUnixSeconds,
        allow_create_engine: false,
        allow_sampling: true,
        allow_logprobs: true,
        allow_search_indices: false,
        allow_view: true,
        allow_fine_tuning: false,
        organization: '*',
        group: null,
        is_blocking: false,
      },
    ],
  });
  app.get('/v1/models', async () => ({
    object: 'list',
    data: [
      card(options.servedModel, options.servedModel, null, options.maxModelLen),
      ...options.models.list.map((adapter) => card(adapter.name, adapter.path, adapter.parent, null)),
    ],
  }));
}
