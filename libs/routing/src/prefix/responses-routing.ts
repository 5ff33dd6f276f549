import {
  responsesChatMessages,
  responsesChatTools,
  type ChatCompletionRequest,
  type ResponsesRequest,
} from '@kvroute/protocols';

/**
 * The routing body of a Responses request (`POST /v1/responses`): the chat request an engine renders
 * it as, so it gets a routing text (routing-text.ts) the way chat does. vLLM builds a Responses prompt
 * as chat messages through the model's chat template (`construct_input_messages`): `instructions` as
 * the system message, then the input items in order (libs/protocols `responsesChatMessages`); its
 * function `tools`, in the chat form vLLM converts them to (`responsesChatTools`), go to the template
 * as for chat.
 *
 * Prefix stability holds as for chat: appending input items only appends messages. A follow-up with
 * `previous_response_id` carries only its new input; its earlier turns are on the backend that stored
 * them, which the router's response-owner map finds (prefix routing is the fallback).
 */
export function responsesRoutingBody(body: ResponsesRequest): ChatCompletionRequest {
  const chat: ChatCompletionRequest = {
    model: body.model,
    messages: responsesChatMessages(body.instructions, body.input),
  };
  const tools = responsesChatTools(body.tools);
  if (tools !== undefined) chat.tools = tools;
  if (typeof body.cache_salt === 'string') chat.cache_salt = body.cache_salt;
  if (body.user !== undefined) chat.user = body.user;
  if (typeof body.max_output_tokens === 'number') chat.max_completion_tokens = body.max_output_tokens;
  const cacheKey = (body as { prompt_cache_key?: unknown }).prompt_cache_key;
  if (typeof cacheKey === 'string') (chat as Record<string, unknown>).prompt_cache_key = cacheKey;
  return chat;
}
