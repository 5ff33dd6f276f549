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
  timeScale: z.coerce.number().positive().default(1).describe('simulated time runs this many times faster than wall time'),
  seed: z.coerce.number().int().default(0).describe('seed for generated text and fault injection'),
  metricsDialect: z.enum(['vllm', 'vllm-v0', 'sglang', 'llamacpp']).default('vllm').describe('which engine /metrics (and error bodies, /health) imitate'),
  engineVersion: z.enum(['v1', 'v0']).optional().describe('scheduler: v1 (chunked prefill, mixed steps) or v0 (prefill-only steps); default v0 for --metrics-dialect vllm-v0, else v1'),
  maxModelLen: z.coerce.number().int().positive().optional().describe("context limit in tokens (default: the profile's)"),
  numGpuBlocks: z.coerce.number().int().min(2).optional().describe("KV-cache capacity in 16-token blocks (default: the profile's)"),
  defaultMaxTokens: z.coerce.number().int().positive().default(16).describe('output tokens when a request gives no max_tokens'),
  eosRandom: z.boolean().default(false).describe('end outputs at a random length ≤ max_tokens with finish_reason "stop" (unless ignore_eos)'),
  promptTokensDetails: z.boolean().default(true).describe('report usage.prompt_tokens_details.cached_tokens (vLLM --enable-prompt-tokens-details)'),
  alwaysIncludeCachedTokens: z.boolean().default(false).describe('report cached_tokens: 0 on a miss too (vLLM omits it)'),
  slots: z.coerce.number().int().positive().default(4).describe('llama.cpp dialect: parallel slots shown by /slots and /props'),
  bodyLimitBytes: z.coerce.number().int().positive().default(32 * 1024 * 1024).describe('largest request body accepted'),
  logLevel: z.enum(['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent']).default('info').describe('log level'),
});
export type SimConfig = z.infer<typeof SimConfig>;

export const SIM_ENV_PREFIX = 'KVROUTE_SIM_';
