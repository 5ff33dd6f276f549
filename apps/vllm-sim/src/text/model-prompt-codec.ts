import type { ChatMessage, ContentPart } from '@kvroute/protocols';
import { ChatTemplateError, type ChatToolInput, type ModelTokenizer } from '@kvroute/tokenization';
import { EngineError } from '../engine-errors';
import { buildOutputWords } from './output-text';
import type { ChatPromptRequest, PromptCodec } from './prompt-codec';

/** Content part types that carry an image (chat, Responses' chat view, Messages' chat view). */
const IMAGE_PART_TYPES = new Set(['image_url', 'input_image', 'image']);

/**
 * The sim with `--tokenizer`: a real model's tokenizer and chat template (@kvroute/tokenization, loaded by
 * create-sim.ts), rendered as vLLM renders chat (template with tools, add_generation_prompt,
 * continue_final_message, chat_template_kwargs; no special tokens added after it) and completions prompts
 * encoded with the model's special tokens. A request the template refuses is vLLM's 400.
 *
 * Images: the library refuses media parts (it cannot know a model's placeholders). The sim stands in for a
 * vision model here as its ChatML path does: an image part becomes a text part naming a hash of its URL, so
 * the request is served and two different images never share a cached prefix.
 *
 * `/detokenize` is not served: ModelTokenizer has no decode (null).
 */
export function createModelPromptCodec(tokenizer: ModelTokenizer): PromptCodec {
  const textTokens = (text: string): number[] => tokenizer.encode(text, { addSpecialTokens: false });
  return {
    name: tokenizer.origin,
    chatPromptTokens: (request) => encodeChat(tokenizer, request),
    completionPromptTokens: (text) => tokenizer.encode(text, { addSpecialTokens: true }),
    textTokens,
    detokenize: () => null,
    outputWords: buildOutputWords(textTokens),
  };
}

function encodeChat(tokenizer: ModelTokenizer, request: ChatPromptRequest): number[] {
  try {
    return tokenizer.encodeChat(request.messages.map(withImagesAsText), {
      tools: (request.tools as readonly ChatToolInput[] | undefined) ?? null,
      addGenerationPrompt: request.addGenerationPrompt ?? true,
      continueFinalMessage: request.continueFinalMessage ?? false,
      ...(request.templateKwargs === undefined ? {} : { templateKwargs: request.templateKwargs }),
    });
  } catch (error) {
    // vLLM answers a chat it cannot render with a 400 naming the template's error.
    if (error instanceof ChatTemplateError) throw new EngineError('bad-request', error.message);
    throw error;
  }
}

function withImagesAsText(message: ChatMessage): ChatMessage {
  const content = message.content;
  if (!Array.isArray(content) || !content.some((part) => IMAGE_PART_TYPES.has(part.type))) return message;
  return {
    ...message,
    content: content.map((part) => (IMAGE_PART_TYPES.has(part.type) ? { type: 'text', text: imageText(part) } : part)),
  };
}

/** `<image:…>` with an FNV-1a hash of the image's URL (or of the whole part when it has none). */
function imageText(part: ContentPart): string {
  const loose = part as ContentPart & { image_url?: unknown; source?: unknown };
  const url =
    typeof loose.image_url === 'string'
      ? loose.image_url
      : (part.image_url?.url ?? JSON.stringify(loose.source ?? part));
  let hash = 2166136261;
  for (let i = 0; i < url.length; i++) hash = Math.imul(hash ^ url.charCodeAt(i), 16777619);
  return `<image:${(hash >>> 0).toString(16)}>`;
}
