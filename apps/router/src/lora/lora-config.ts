import { z } from 'zod';

/** LoRA adapter routing's options (issue 33; lora/adapter-routing.ts), spread into the router's config schema. */
export const LORA_CONFIG_FIELDS = {
  loraRouting: z
    .boolean()
    .default(true)
    .describe(
      "route a request naming a LoRA adapter (a /v1/models card with a parent) in its base model's pool, " +
        "pricing the adapter's load on each backend; false: an adapter is just another model (adapter-blind, " +
        'for comparison)',
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

/** `name=path@base` (the command line's form of a loadable adapter). */
const ADAPTER_SPEC = /^([^=@,\s]+)=([^@,\s]+)@([^,\s]+)$/;

/** An adapter the router may load on demand: `{name, path, base}` in a file, `name=path@base` on the command line. */
const LoadableAdapterEntry = z.union([
  z
    .string()
    .regex(ADAPTER_SPEC, 'an adapter is name=path@base')
    .transform((spec) => {
      const [, name, path, base] = ADAPTER_SPEC.exec(spec) as unknown as [string, string, string, string];
      return { name, path, base };
    }),
  z.strictObject({
    name: z.string().min(1).max(256),
    path: z.string().min(1).max(4096),
    base: z.string().min(1).max(256),
  }),
]);

/** Loading adapters on demand (lora/adapter-loader.ts): off until adapters are listed. */
export const LORA_LOAD_CONFIG_FIELDS = {
  loraAdapters: z
    .array(LoadableAdapterEntry)
    .max(10_000)
    .default([])
    .describe(
      "adapters the router may load on demand onto their base model's backends (POST /v1/load_lora_adapter; " +
        'vLLM needs VLLM_ALLOW_RUNTIME_LORA_UPDATING): {name,path,base} objects in a file, name=path@base ' +
        'comma-separated on the command line; empty: never loads',
    ),
  loraLoadTimeoutMs: z.coerce
    .number()
    .int()
    .min(100)
    .max(600_000)
    .default(30_000)
    .describe("an adapter load's deadline, ms: a replica waiting for another's load waits as long"),
  loraLoadSpacingMs: z.coerce
    .number()
    .int()
    .min(0)
    .max(600_000)
    .default(1_000)
    .describe(
      'least time between two adapter loads on one backend, ms (a request that would load sooner goes elsewhere)',
    ),
  loraUnavailableMs: z.coerce
    .number()
    .int()
    .min(0)
    .max(3_600_000)
    .default(60_000)
    .describe('how long a failed adapter load keeps the adapter off that backend, ms'),
  loraMaxAdaptersPerBackend: z.coerce
    .number()
    .int()
    .min(0)
    .max(10_000)
    .default(0)
    .describe(
      'a backend holding this many adapters unloads its coldest loadable one (not running, sent nothing for longest) before a load; 0: never unloads',
    ),
};
