import { z } from 'zod';

/**
 * Prefill/decode disaggregation's options (issue 32; pipeline/prefill.ts), spread into the router's config schema. A
 * model is disaggregated as soon as it has a prefill-capable and a decode-capable backend (roles: backends/backend-role.ts),
 * so nothing here turns it on: these say how its requests are split.
 */
export const PD_CONFIG_FIELDS = {
  prefillBackends: z
    .array(z.url({ protocol: /^https?$/ }))
    .default([])
    .describe('prefill engines (comma-separated URLs on the command line): backends of role prefill'),
  decodeBackends: z
    .array(z.url({ protocol: /^https?$/ }))
    .default([])
    .describe('decode engines (comma-separated URLs on the command line): backends of role decode'),
  pdProtocol: z
    .enum(['vllm-nixl', 'sglang'])
    .default('vllm-nixl')
    .describe(
      "how a disaggregated request's legs go: vllm-nixl (vLLM's NixlConnector: the prefill leg first, its " +
        "kv_transfer_params to the decode leg) or sglang (one body to both at once, with the prefill engine's " +
        'bootstrap address and a room)',
    ),
  pdMinUncachedTokens: z.coerce
    .number()
    .int()
    .min(0)
    .default(512)
    .describe(
      'a request is disaggregated only when its decode backend lacks at least this many prompt tokens; with ' +
        'fewer, the decode backend prefills them itself (cheaper than a transfer)',
    ),
  pdPrefillPolicy: z
    .enum(['cacheaware', 'leastloaded'])
    .default('cacheaware')
    .describe(
      'how the prefill backend is chosen: cacheaware (its prefix match against its prefill load) or leastloaded (cache-blind, for comparison)',
    ),
  pdPrefillTimeoutMs: z.coerce
    .number()
    .int()
    .positive()
    .default(60_000)
    .describe("vllm-nixl: the prefill leg's deadline, ms (connection, prefill and answer)"),
  pdPrefillTries: z.coerce
    .number()
    .int()
    .min(1)
    .max(8)
    .default(2)
    .describe(
      'vllm-nixl: prefill backends tried (a refused connection, 5xx, 429 or timeout moves on) before the decode backend serves the request whole',
    ),
};

/** The configured backends with the `prefillBackends` and `decodeBackends` lists as backends of those roles. */
export function backendsWithRoles<Configured extends { readonly url: string }>(config: {
  readonly backends: readonly Configured[];
  readonly prefillBackends: readonly string[];
  readonly decodeBackends: readonly string[];
}): Array<Configured | { url: string; weight: number; role: 'prefill' | 'decode' }> {
  return [
    ...config.backends,
    ...config.prefillBackends.map((url) => ({ url, weight: 1, role: 'prefill' as const })),
    ...config.decodeBackends.map((url) => ({ url, weight: 1, role: 'decode' as const })),
  ];
}
