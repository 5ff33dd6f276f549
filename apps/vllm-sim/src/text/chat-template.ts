import type { ChatMessage, ContentPart } from '@kvroute/protocols';
import { SPECIAL_TOKENS, tokenize } from './tokenizer';

/**
 * Renders chat messages into prompt tokens the way Qwen2.5's ChatML template does, so cache reuse
 * follows what the engine really sees: role markers, every message, tool definitions and tool calls.
 *
 *   <|im_start|>system\n{system text}{# Tools block if tools}<|im_end|>\n
 *   <|im_start|>{role}\n{content}<|im_end|>\n            (per message)
 *   <|im_start|>assistant\n                             (generation prompt)
 *
 * Qwen inserts a default system message when none is given; so do we. Tool results are rendered as
 * user turns wrapped in <tool_response>, assistant tool calls as <tool_call> JSON. An image part
 * becomes a vision placeholder followed by a hash of its URL, so two different images never share
 * a cached prefix (vLLM mixes multimodal hashes into block hashes).
 */
const DEFAULT_SYSTEM = 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.';

export interface ChatPromptInput {
  readonly messages: readonly ChatMessage[];
  readonly tools?: readonly unknown[] | undefined;
}

export function renderChatPrompt(input: ChatPromptInput): number[] {
  const tokens: number[] = [];
  const messages = input.messages;
  const first = messages[0];
  const hasSystem = first !== undefined && (first.role === 'system' || first.role === 'developer');
  let systemText = hasSystem ? contentText(first.content) : DEFAULT_SYSTEM;
  if (input.tools && input.tools.length > 0) systemText += renderToolsBlock(input.tools);
  pushTurn(tokens, 'system', systemText);
  for (let index = hasSystem ? 1 : 0; index < messages.length; index++) {
    const message = messages[index] as ChatMessage;
    if (message.role === 'tool' || message.role === 'function') {
      pushTurn(tokens, 'user', `<tool_response>\n${contentText(message.content)}\n</tool_response>`);
    } else if (message.role === 'assistant') {
      let text = contentText(message.content);
      for (const call of message.tool_calls ?? []) {
        text += `\n<tool_call>\n${JSON.stringify({ name: call.function.name, arguments: call.function.arguments ?? '' })}\n</tool_call>`;
      }
      pushTurn(tokens, 'assistant', text);
    } else {
      pushContentTurn(tokens, message.role === 'developer' ? 'system' : message.role, message.content);
    }
  }
  tokens.push(SPECIAL_TOKENS.imStart, ...tokenize('assistant\n'));
  return tokens;
}

function pushTurn(tokens: number[], role: string, text: string): void {
  tokens.push(SPECIAL_TOKENS.imStart);
  appendAll(tokens, tokenize(`${role}\n${text}`));
  tokens.push(SPECIAL_TOKENS.imEnd);
  appendAll(tokens, NEWLINE);
}

/** Like pushTurn but keeps image parts as placeholder tokens. */
function pushContentTurn(tokens: number[], role: string, content: ChatMessage['content']): void {
  if (!Array.isArray(content)) return pushTurn(tokens, role, contentText(content));
  tokens.push(SPECIAL_TOKENS.imStart);
  appendAll(tokens, tokenize(`${role}\n`));
  for (const part of content) {
    if (part.type === 'text') appendAll(tokens, tokenize(part.text ?? ''));
    else tokens.push(SPECIAL_TOKENS.visionPad, ...tokenize(imageKey(part)));
  }
  tokens.push(SPECIAL_TOKENS.imEnd);
  appendAll(tokens, NEWLINE);
}

function contentText(content: ChatMessage['content']): string {
  if (content === null || content === undefined) return '';
  if (typeof content === 'string') return content;
  return content.map((part) => (part.type === 'text' ? (part.text ?? '') : '')).join('');
}

function renderToolsBlock(tools: readonly unknown[]): string {
  const lines = tools.map((tool) => JSON.stringify(tool)).join('\n');
  return (
    '\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' +
    'You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n' +
    lines +
    '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags.'
  );
}

function imageKey(part: ContentPart): string {
  const url = part.image_url?.url ?? JSON.stringify(part);
  let hash = 2166136261;
  for (let i = 0; i < url.length; i++) hash = Math.imul(hash ^ url.charCodeAt(i), 16777619);
  return `image:${(hash >>> 0).toString(16)}`;
}

const NEWLINE = tokenize('\n');

/** Appends without spreading (spread arguments overflow the stack for very long prompts). */
function appendAll(target: number[], source: readonly number[]): void {
  for (const token of source) target.push(token);
}
