import { z } from 'zod';

/**
 * Request bodies as the OpenAI API (and vLLM's OpenAI server) accept them. Only the fields that
 * routing or simulation read are typed; every other field passes through untouched (loose objects),
 * because engines accept many extensions (`ignore_eos`, `top_k`, `cache_salt`, …) and a proxy must
 * forward bodies as they came.
 */

/**
 * vLLM's `cache_salt` rule (apps/vllm-sim/README.md, "cache_salt"): null is no salt, "" or a non-string
 * is a 400; the newest vLLM also refuses over 128 characters (code points) and '@', '/', '\\', NUL.
 * Checked on every endpoint that takes one (chat, completions, Responses, Messages), so a salt the
 * router routes by is one every vLLM version accepts.
 */
export const CacheSalt = z
  .string()
  .min(1, "Parameter 'cache_salt' must be a non-empty string if provided.")
  .refine(
    (salt) => [...salt].length <= 128 && !/[@/\\\0]/.test(salt),
    "Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\', or NUL.",
  )
  .nullish();

export const ContentPart = z.looseObject({
  type: z.string(),
  text: z.string().optional(),
  image_url: z.looseObject({ url: z.string() }).optional(),
});
export type ContentPart = z.infer<typeof ContentPart>;

export const ToolCall = z.looseObject({
  id: z.string().optional(),
  type: z.string().optional(),
  function: z.looseObject({ name: z.string(), arguments: z.string().optional() }),
});
export type ToolCall = z.infer<typeof ToolCall>;

/**
 * `role` is any non-empty string: vLLM accepts custom roles (its `CustomChatCompletionMessageParam`,
 * e.g. Llama's `ipython`) and hands them to the chat template, so the router must not refuse them; the
 * routing text keeps the role as sent.
 */
export const ChatMessage = z.looseObject({
  role: z.string().min(1),
  content: z.union([z.string(), z.array(ContentPart), z.null()]).optional(),
  name: z.string().optional(),
  tool_calls: z.array(ToolCall).optional(),
  tool_call_id: z.string().optional(),
});
export type ChatMessage = z.infer<typeof ChatMessage>;

export const StreamOptions = z.looseObject({
  include_usage: z.boolean().optional(),
  continuous_usage_stats: z.boolean().optional(),
});

/** Fields common to chat and text completions. Token counts must be positive integers when present. */
const SamplingFields = {
  model: z.string().min(1),
  stream: z.boolean().optional(),
  stream_options: StreamOptions.nullish(),
  max_tokens: z.number().int().positive().nullish(),
  n: z.number().int().min(1).max(128).optional(),
  ignore_eos: z.boolean().optional(),
  cache_salt: CacheSalt,
  user: z.string().optional(),
};

export const ChatCompletionRequest = z.looseObject({
  ...SamplingFields,
  messages: z.array(ChatMessage).min(1),
  max_completion_tokens: z.number().int().positive().nullish(),
  tools: z.array(z.looseObject({ type: z.string(), function: z.looseObject({ name: z.string() }) })).optional(),
});
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequest>;

/** `prompt` as vLLM takes it: text, a batch of texts, token ids, or a batch of token-id lists. */
export const CompletionPrompt = z.union([
  z.string(),
  z.array(z.string()).min(1),
  z.array(z.number().int().nonnegative()).min(1),
  z.array(z.array(z.number().int().nonnegative()).min(1)).min(1),
]);
export type CompletionPrompt = z.infer<typeof CompletionPrompt>;

export const CompletionRequest = z.looseObject({
  ...SamplingFields,
  prompt: CompletionPrompt,
  echo: z.boolean().optional(),
});
export type CompletionRequest = z.infer<typeof CompletionRequest>;

/** The usage block that vLLM returns; `prompt_tokens_details` only when a prefix-cache hit happened. */
export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details?: { cached_tokens: number } | null;
}
