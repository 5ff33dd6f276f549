import type { FastifyInstance } from 'fastify';
import { z } from 'zod';
import type { LoraRegistry } from '../lora/lora-registry';
import { parseBody } from './generation-routes';

export interface LoraRoutesOptions {
  readonly models: LoraRegistry;
  /** Reading an adapter from disk: how long a load request takes, wall ms (simulated ms ÷ time scale). */
  readonly loadWallMs: number;
  /** Waits `ms` wall milliseconds (tests may inject one); default a timer. */
  readonly sleep?: (ms: number) => Promise<void>;
}

// vLLM's LoadLoRAAdapterRequest / UnloadLoRAAdapterRequest (vllm/entrypoints/serve/lora/protocol.py).
const LoadLoraAdapterRequest = z.object({
  lora_name: z.string(),
  lora_path: z.string(),
  load_inplace: z.boolean().default(false),
});
const UnloadLoraAdapterRequest = z.object({
  lora_name: z.string(),
  lora_int_id: z.number().int().nullable().optional(),
});

const defaultSleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * The runtime LoRA endpoints (`vllm/entrypoints/serve/lora/api_router.py`), registered only when runtime updating
 * is allowed: vLLM attaches the router only with VLLM_ALLOW_RUNTIME_LORA_UPDATING, so otherwise the paths are 404.
 * A success is a 200 with a plain-text body; a refusal vLLM's error JSON (400 InvalidUserInput, 404 NotFoundError).
 * A load takes the adapter's read time before it answers (vLLM's `add_lora` reads it into the CPU cache then).
 */
export async function loraRoutes(app: FastifyInstance, options: LoraRoutesOptions): Promise<void> {
  const sleep = options.sleep ?? defaultSleep;
  // Loads of one name are serialised, as vLLM holds a lock per adapter name.
  const pending = new Map<string, Promise<void>>();

  app.post('/v1/load_lora_adapter', async (request, reply) => {
    const body = parseBody(LoadLoraAdapterRequest, request.body);
    const previous = pending.get(body.lora_name) ?? Promise.resolve();
    const load = previous.then(async () => {
      options.models.checkLoad(body.lora_name, body.lora_path, body.load_inplace);
      await sleep(options.loadWallMs);
      options.models.add(body.lora_name, body.lora_path);
    });
    const settled = load.then(
      () => undefined,
      () => undefined,
    );
    pending.set(body.lora_name, settled);
    // The last load of a name forgets its entry once it settles.
    void settled.then(() => {
      if (pending.get(body.lora_name) === settled) pending.delete(body.lora_name);
    });
    await load;
    return reply
      .code(200)
      .type('text/plain; charset=utf-8')
      .send(`Success: LoRA adapter '${body.lora_name}' added successfully.`);
  });

  app.post('/v1/unload_lora_adapter', async (request, reply) => {
    const body = parseBody(UnloadLoraAdapterRequest, request.body);
    options.models.remove(body.lora_name);
    return reply
      .code(200)
      .type('text/plain; charset=utf-8')
      .send(`Success: LoRA adapter '${body.lora_name}' removed successfully.`);
  });
}
