/**
 * vLLM's endpoints outside `/v1/` that the router passes through (`POST`, by the pass-through policy):
 * tokenizer and pooling endpoints, as vLLM's api_server registers them (apps/router/README.md,
 * "Endpoints"). `/v1/*` needs no list: every `POST /v1/*` is proxied. They are admitted like `/v1/*`
 * (identity, in-flight caps: admit.ts), since they cost the backends as much.
 */
export const ROOT_PASSTHROUGH_PATHS = [
  '/tokenize',
  '/detokenize',
  '/pooling',
  '/classify',
  '/score',
  '/rerank',
  '/v2/rerank',
] as const;

const ROOT_PASSTHROUGH = new Set<string>(ROOT_PASSTHROUGH_PATHS);

/** Whether `url` (path and query) is one the request path proxies: `/v1/*` or a pass-through path above. */
export function isProxiedPath(url: string): boolean {
  if (url.startsWith('/v1/')) return true;
  const query = url.indexOf('?');
  return ROOT_PASSTHROUGH.has(query === -1 ? url : url.slice(0, query));
}
