import { checkResponsesLimits, ResponsesRequest, type ChatCompletionRequest, type GenerationLimits } from '@kvroute/protocols';
import { responsesRoutingBody } from '@kvroute/routing';
import { RouterError } from '../errors';
import { validateBody } from '../http/validate-body';

/** What the later stages need of a Responses request besides its routing request. */
export interface ResponsesFacts {
  /** `previous_response_id`: the response this turn continues (routed to the backend that stored it). */
  readonly previousResponseId: string | null;
  /** The backend will store the answer (`store` absent or true: OpenAI's and vLLM's default): learn its id. */
  readonly stores: boolean;
}

/**
 * Part of the parse stage for `POST /v1/responses`: counts (`input` items and their parts, `tools`),
 * then the schema, then the chat body the routing text is built from (libs/routing
 * responses-routing.ts). Throws a RouterError (400) for what it refuses.
 */
export function parseResponsesBody(body: unknown, limits: GenerationLimits): { routingBody: ChatCompletionRequest; facts: ResponsesFacts } {
  const overLimit = checkResponsesLimits(body, limits);
  if (overLimit !== null) throw new RouterError('ROUTER_ERR_INVALID_REQUEST', overLimit.message, { param: overLimit.param });
  const request = validateBody(ResponsesRequest, body);
  return {
    routingBody: responsesRoutingBody(request),
    facts: { previousResponseId: request.previous_response_id ?? null, stores: request.store !== false },
  };
}
