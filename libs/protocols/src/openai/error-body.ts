/**
 * The OpenAI error shape that clients (and the `openai` SDK) parse:
 * `{ "error": { "message", "type", "param", "code" } }`.
 */
export interface OpenAIErrorBody {
  error: {
    message: string;
    type: string;
    param: string | null;
    code: string | number | null;
  };
}

export function createOpenAIErrorBody(
  message: string,
  type: string,
  options: { param?: string | null; code?: string | number | null } = {},
): OpenAIErrorBody {
  return { error: { message, type, param: options.param ?? null, code: options.code ?? null } };
}
