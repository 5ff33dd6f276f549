import type { GenerationLimits, LimitViolation } from './generation-limits';

/**
 * Size limits of a Responses request (`POST /v1/responses`), checked on the parsed body before schema
 * validation, like checkGenerationLimits for chat: `input` items count as messages, an item's content
 * parts as a message's parts, `tools` as tools. Only array lengths are read; no recursion.
 */
export function checkResponsesLimits(body: unknown, limits: GenerationLimits): LimitViolation | null {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) return null;
  const { input, tools } = body as Record<string, unknown>;
  if (Array.isArray(tools) && tools.length > limits.maxTools)
    return tooMany('tools', tools.length, limits.maxTools, 'entries');
  if (!Array.isArray(input)) return null;
  if (input.length > limits.maxMessages) return tooMany('input', input.length, limits.maxMessages, 'items');
  let parts = 0;
  for (let index = 0; index < input.length; index++) {
    const item = input[index] as { content?: unknown } | null;
    const content = typeof item === 'object' && item !== null ? item.content : undefined;
    if (!Array.isArray(content)) continue;
    if (content.length > limits.maxContentPartsPerMessage)
      return tooMany(`input[${index}].content`, content.length, limits.maxContentPartsPerMessage, 'content parts');
    parts += content.length;
    if (parts > limits.maxContentParts) {
      return {
        message: `The request holds more than ${limits.maxContentParts} content parts in total (the limit is passed at \`input[${index}].content\`).`,
        param: `input[${index}].content`,
      };
    }
  }
  return null;
}

function tooMany(param: string, count: number, max: number, what: string): LimitViolation {
  return { message: `\`${param}\` has ${count} ${what}; at most ${max} are accepted.`, param };
}
