import type { ApiKeyRole } from '../tenants/api-key';

/**
 * vLLM's endpoints outside `/v1/` that the router passes through (`POST`, by the pass-through policy):
 * tokenizer and pooling endpoints, as vLLM's api_server registers them (apps/router/README.md,
 * "Endpoints"). They are admitted like `/v1/*` (identity, in-flight caps: admit.ts), since they cost the
 * backends as much.
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

/**
 * vLLM's pooling endpoints (embeddings, pooling, classify, score, rerank): they run a prompt through the
 * model as generation does, so their prompts fill the same prefix cache, and a tenant's are salted like
 * its generation requests (parse.ts: the tenant's `cache_salt` in the forwarded body).
 */
const POOLING_PATHS = new Set<string>([
  '/v1/embeddings',
  '/pooling',
  '/v1/pooling',
  '/classify',
  '/v1/classify',
  '/score',
  '/v1/score',
  '/rerank',
  '/v1/rerank',
  '/v2/rerank',
]);

/** Whether `url` (path and query) is a pooling endpoint's. */
export function isPoolingPath(url: string): boolean {
  return POOLING_PATHS.has(pathOf(url));
}

/**
 * Engine control endpoints under `/v1/`: they change what an engine serves for every tenant (LoRA
 * adapters loaded and unloaded). Only an `admin` key's requests are proxied (to the one backend the
 * pass-through policy picks: to act on every engine, call the engines themselves); a user or bench key,
 * and any caller in open mode, gets 403 and no backend sees the request. vLLM's control endpoints
 * outside `/v1/` (`/reset_prefix_cache`, `/sleep`, `/wake_up`, `/collective_rpc`, profiling, …) match
 * no rule below: they are never proxied (404), whoever asks.
 */
export const ENGINE_CONTROL_PATHS = ['/v1/load_lora_adapter', '/v1/unload_lora_adapter'] as const;

/** A caller as the allow-list knows it: its key's role, or `open` (auth `none`: anyone). */
export type PassthroughCaller = ApiKeyRole | 'open';

/** One rule of the allow-list: these paths (exact, or `prefix` with anything after it), for these callers. */
export interface PassthroughRule {
  readonly paths?: ReadonlySet<string>;
  readonly prefix?: string;
  readonly callers: ReadonlySet<PassthroughCaller>;
}

const EVERYONE = new Set<PassthroughCaller>(['open', 'user', 'bench', 'admin']);

/**
 * The pass-through allow-list per caller, the first rule whose paths match deciding: engine control
 * for admin keys, then vLLM's root tokenizer and pooling paths and every other `/v1/*` path for everyone.
 * A path no rule matches is not proxied.
 */
const PASSTHROUGH_RULES: readonly PassthroughRule[] = [
  { paths: new Set<string>(ENGINE_CONTROL_PATHS), callers: new Set<PassthroughCaller>(['admin']) },
  { paths: new Set<string>(ROOT_PASSTHROUGH_PATHS), callers: EVERYONE },
  { prefix: '/v1/', callers: EVERYONE },
];

function pathOf(url: string): string {
  const query = url.indexOf('?');
  return query === -1 ? url : url.slice(0, query);
}

function ruleOf(path: string): PassthroughRule | undefined {
  return PASSTHROUGH_RULES.find(
    (rule) => rule.paths?.has(path) === true || (rule.prefix !== undefined && path.startsWith(rule.prefix)),
  );
}

/**
 * The allow-list rule of `url` (path and query), looked up once per request: undefined when the router does not
 * proxy it at all; `ruleAllows` then says whether a caller may reach it.
 */
export function passthroughRuleOf(url: string): PassthroughRule | undefined {
  return ruleOf(pathOf(url));
}

/** Whether `caller` may reach a path of `rule`. */
export function ruleAllows(rule: PassthroughRule, caller: PassthroughCaller): boolean {
  return rule.callers.has(caller);
}

/**
 * Whether a request is a pass-through `GET` (generation-routes.ts: `GET /v1/*` but the router's own
 * `/v1/models` and stored responses'): admitted as a POST is (caps, identity, caller slots, allow-list).
 */
export function isPassthroughGet(method: string, url: string): boolean {
  if (method !== 'GET') return false;
  const path = pathOf(url);
  return (
    path.startsWith('/v1/') &&
    path !== '/v1/models' &&
    !path.startsWith('/v1/models/') &&
    !path.startsWith('/v1/responses/')
  );
}
