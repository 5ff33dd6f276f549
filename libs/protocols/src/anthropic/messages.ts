import { z } from 'zod';
import { CacheSalt } from '../openai/chat-completions';

/**
 * Anthropic Messages request bodies (`POST /v1/messages`), as vLLM's Anthropic endpoint accepts them
 * (vllm/entrypoints/anthropic/protocol.py `AnthropicMessagesRequest`). Permissive, like the chat schema:
 * only what routing reads is typed (`model`, `system`, `tools`, `messages[].role/content`, `max_tokens`,
 * `stream`, `metadata.user_id`); every other field passes through to the engine untouched (loose objects).
 * Roles are any string: vLLM maps Claude Code's `ctx`/`msg` to `user` and refuses the rest itself, so the
 * router does not need to be stricter. Counts (messages, tools, blocks) are bounded before this schema
 * runs, by the same check as chat (request-limits/generation-limits.ts): `messages`, `tools` and each
 * message's `content` array have the same names here.
 */

/**
 * One content block: `text`, `image`, `tool_use`, `tool_result`, `thinking`, `redacted_thinking`, …
 * Only `type` is required; the routing text keeps a text block's `text` and every other block as JSON.
 */
export const MessagesContentBlock = z.looseObject({
  type: z.string(),
  text: z.string().optional(),
});
export type MessagesContentBlock = z.infer<typeof MessagesContentBlock>;

export const MessagesMessage = z.looseObject({
  role: z.string().min(1),
  content: z.union([z.string(), z.array(MessagesContentBlock)]),
});
export type MessagesMessage = z.infer<typeof MessagesMessage>;

export const MessagesTool = z.looseObject({ name: z.string() });

export const MessagesRequest = z.looseObject({
  model: z.string().min(1),
  messages: z.array(MessagesMessage).min(1),
  /** Required by Anthropic and by vLLM (positive). */
  max_tokens: z.number().int().positive(),
  system: z.union([z.string(), z.array(MessagesContentBlock)]).nullish(),
  tools: z.array(MessagesTool).nullish(),
  stream: z.boolean().nullish(),
  /** Anthropic's end-user id: the request's affinity key when no `X-Session-Id` is sent. */
  metadata: z.looseObject({ user_id: z.string().nullish() }).nullish(),
  // The tenant's salt rides here as on chat (vLLM's Anthropic endpoint ignores the field today:
  // docs in apps/router/README.md), with chat's rule.
  cache_salt: CacheSalt,
});
export type MessagesRequest = z.infer<typeof MessagesRequest>;

/**
 * The usage of a Messages response (`usage` of the body, of `message_start`'s message, of `message_delta`).
 * Anthropic's meaning: `input_tokens` are the prompt tokens neither read from nor written to the cache,
 * so the prompt is the sum of the three. vLLM's Anthropic endpoint (as read, serving.py) sets only
 * `input_tokens`, to the whole prompt (its chat `prompt_tokens`), and leaves the cache fields out.
 */
export interface MessagesUsage {
  input_tokens: number;
  output_tokens: number;
  cache_read_input_tokens?: number | null;
  cache_creation_input_tokens?: number | null;
}
