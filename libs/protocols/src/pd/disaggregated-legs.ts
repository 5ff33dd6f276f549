/**
 * The request bodies of prefill/decode disaggregation, as the engines take them (shared/reference/wave3-facts.md §1):
 *
 * - **vLLM, NixlConnector** (its toy proxy `tests/v1/kv_connector/nixl_integration/toy_proxy_server.py`): two legs one
 *   after the other. Leg 1 to the prefill engine is the client's body with `kv_transfer_params` asking for a remote
 *   decode, `stream: false` (no `stream_options`), one output token (`max_tokens`, and `max_completion_tokens` when the
 *   body has it) and no `min_tokens`. Its non-streaming answer carries, top level, the `kv_transfer_params` the decode
 *   engine needs; leg 2 to the decode engine is the client's body with those params, forwarded untouched. Without
 *   params the decode engine prefills locally.
 * - **SGLang** (`python/sglang/srt/disaggregation/mini_lb.py`): one body to both engines at once, with
 *   `bootstrap_host`, `bootstrap_port` and `bootstrap_room` naming the prefill engine's bootstrap server and the
 *   transfer; only the decode engine's answer goes back.
 *
 * Bodies are JSON objects here (parsed once by the caller); nothing is mutated, each leg gets a copy.
 */
export type JsonObject = Record<string, unknown>;

/** What leg 1 adds: vLLM's toy proxy sends exactly these fields. */
export const NIXL_PREFILL_PARAMS: Readonly<JsonObject> = Object.freeze({
  do_remote_decode: true,
  do_remote_prefill: false,
  remote_engine_id: null,
  remote_block_ids: null,
  remote_host: null,
  remote_port: null,
});

/** Body fields that steer a transfer between engines: a client may not set them (the router does). */
export const DISAGGREGATION_FIELDS = [
  'kv_transfer_params',
  'bootstrap_host',
  'bootstrap_port',
  'bootstrap_room',
] as const;

/** The disaggregation fields `body` sets (present, even null): a request naming any is refused unless privileged. */
export function disaggregationFieldsIn(body: JsonObject): string[] {
  return DISAGGREGATION_FIELDS.filter((field) => Object.hasOwn(body, field));
}

/** vLLM leg 1: the prefill engine computes the prompt's KV, emits one token and holds the blocks for the decode side. */
export function nixlPrefillBody(body: JsonObject): JsonObject {
  const leg: JsonObject = { ...body, kv_transfer_params: { ...NIXL_PREFILL_PARAMS }, stream: false, max_tokens: 1 };
  delete leg.stream_options;
  delete leg.min_tokens;
  if (Object.hasOwn(body, 'max_completion_tokens')) leg.max_completion_tokens = 1;
  return leg;
}

/** vLLM leg 2: the client's body with the prefill engine's params, or as it came when there are none (a local prefill). */
export function nixlDecodeBody(body: JsonObject, prefillParams: JsonObject | null): JsonObject {
  if (prefillParams === null) return body;
  return { ...body, kv_transfer_params: prefillParams };
}

/** Largest `kv_transfer_params` taken from a prefill answer, serialised bytes: 128 k tokens' block ids fit in ~60 KB. */
export const MAX_PREFILL_PARAMS_BYTES = 1 << 20;

/**
 * The `kv_transfer_params` of a prefill engine's answer, if well-formed: an object that asks for a remote prefill
 * (`do_remote_prefill: true`) and names the engine and blocks to pull (`remote_engine_id`, `remote_block_ids`),
 * within MAX_PREFILL_PARAMS_BYTES. Anything else is null ("no params": the decode engine prefills locally) and
 * `malformed` says whether params were there but unusable (counted by the caller, never relayed).
 */
export function prefillParamsOf(answer: unknown): { params: JsonObject | null; malformed: boolean } {
  if (answer === null || typeof answer !== 'object' || Array.isArray(answer)) return { params: null, malformed: false };
  const params = (answer as JsonObject).kv_transfer_params;
  if (params === undefined || params === null) return { params: null, malformed: false };
  if (typeof params !== 'object' || Array.isArray(params)) return { params: null, malformed: true };
  const fields = params as JsonObject;
  const usable =
    fields.do_remote_prefill === true &&
    typeof fields.remote_engine_id === 'string' &&
    Array.isArray(fields.remote_block_ids) &&
    JSON.stringify(fields).length <= MAX_PREFILL_PARAMS_BYTES;
  return usable ? { params: fields, malformed: false } : { params: null, malformed: true };
}

/**
 * The prompt tokens the prefill engine found in its prefix cache, from its leg-1 answer's usage
 * (`usage.prompt_tokens_details.cached_tokens`): 0 when the usage says nothing of them (vLLM leaves
 * `prompt_tokens_details` out on a miss), null when the answer has no usage at all. It is what the decode leg's usage
 * reports to the client in its place (the decode engine counts the pulled tokens as cached: llm-d's sidecar
 * rewrites them the same way, `cached_tokens_usage_rewriter.go`).
 */
export function prefillCachedTokensOf(answer: unknown): number | null {
  const usage = fieldOf(answer, 'usage');
  if (usage === undefined || usage === null || typeof usage !== 'object') return null;
  const cached = fieldOf(fieldOf(usage, 'prompt_tokens_details'), 'cached_tokens');
  return typeof cached === 'number' && Number.isSafeInteger(cached) && cached >= 0 ? cached : 0;
}

function fieldOf(value: unknown, key: string): unknown {
  return value !== null && typeof value === 'object' && !Array.isArray(value) ? (value as JsonObject)[key] : undefined;
}

/** SGLang's default bootstrap port (`--disaggregation-bootstrap-port`). */
export const SGLANG_DEFAULT_BOOTSTRAP_PORT = 8998;

export interface SglangBootstrap {
  /** The prefill engine's host, as the decode engine reaches it. */
  readonly host: string;
  readonly port: number;
  /**
   * The transfer's room: SGLang draws it in [0, 2^63 − 1]; a router draws it below 2^53 so that it stays an exact
   * JSON number for every parser on the way.
   */
  readonly room: number;
}

/** SGLang: the body both engines get. */
export function sglangBootstrapBody(body: JsonObject, bootstrap: SglangBootstrap): JsonObject {
  return { ...body, bootstrap_host: bootstrap.host, bootstrap_port: bootstrap.port, bootstrap_room: bootstrap.room };
}

/** A bootstrap room from `random` (uniform in [0, 1)): an integer in [0, 2^53). */
export function bootstrapRoom(random: () => number): number {
  return Math.floor(random() * 2 ** 21) * 2 ** 32 + Math.floor(random() * 2 ** 32);
}
