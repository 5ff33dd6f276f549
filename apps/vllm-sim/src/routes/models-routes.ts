import type { FastifyInstance } from 'fastify';

export interface ModelsRoutesOptions {
  readonly servedModel: string;
  readonly maxModelLen: number;
  readonly createdUnixSeconds: number;
}

/** `GET /v1/models` in vLLM's shape: one card for the served model. */
export async function modelsRoutes(app: FastifyInstance, options: ModelsRoutesOptions): Promise<void> {
  app.get('/v1/models', async () => ({
    object: 'list',
    data: [
      {
        id: options.servedModel,
        object: 'model',
        created: options.createdUnixSeconds,
        owned_by: 'vllm',
        root: options.servedModel,
        parent: null,
        max_model_len: options.maxModelLen,
        permission: [
          {
            id: `modelperm-${options.servedModel}`,
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
      },
    ],
  }));
}
