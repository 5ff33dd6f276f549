import { z } from 'zod';

/** LoRA adapter routing's options (issue 33; lora/adapter-routing.ts), spread into the router's config schema. */
export const LORA_CONFIG_FIELDS = {
  loraRouting: z
    .boolean()
    .default(true)
    .describe(
      "route a request naming a LoRA adapter (a /v1/models card with a parent) in its base model's pool, pricing the adapter's load on each backend; false: an adapter is just another model (adapter-blind, for comparison)",
    ),
  loraLoadMs: z.coerce
    .number()
    .min(0)
    .max(600_000)
    .default(200)
    .describe('the wait an adapter load adds on a backend with a free adapter slot, ms'),
  loraSlotWaitMs: z.coerce
    .number()
    .min(0)
    .max(600_000)
    .default(400)
    .describe(
      'the wait for a busy adapter slot, ms: priced where requests for the adapter already wait, and (plus loraLoadMs) where every slot runs another adapter',
    ),
  loraRecentMs: z.coerce
    .number()
    .int()
    .min(0)
    .max(600_000)
    .default(2_000)
    .describe(
      "how long a replica counts a backend it just sent an adapter's request to as running the adapter (until the health poller's next scrape says), ms",
    ),
};
