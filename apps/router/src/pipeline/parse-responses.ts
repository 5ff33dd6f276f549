import {
  checkResponsesLimits,
  ResponsesRequest,
  type ChatCompletionRequest,
  type GenerationLimits,
} from '@kvroute/protocols';
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
 *
 * `scoped` (the request has a tenant identity): a body with `request_id` is refused. vLLM's
 * `ResponsesRequest.request_id` is client-settable and becomes the stored response's id, and the
 * engine's store is a plain dict keyed by it: a tenant sending another tenant's response id there
 * would overwrite that stored response on the engine that holds it (the owner map cannot help: the
 * write happens on the engine). Open mode has no tenants to keep apart, so the field passes through.
 *
 * `background: true` is refused (400, param `background`) in every mode. The engine answers such a
 * request at once (`queued`) and generates after the HTTP exchange is over, while everything the router
 * accounts a request by ends with that exchange: the backend's lease (the policy's view of its load),
 * the tenant's concurrency slot, the token settlement from usage. Relayed, a background response ran
 * unaccounted: leases released at once, its tokens never settled. Holding them instead would need the
 * router to poll every engine for every background response it stored until it finished, across
 * replicas and restarts; refused, a client learns at once to send the request in the foreground.
 */
export function parseResponsesBody(
  body: unknown,
  limits: GenerationLimits,
  scoped = false,
): { routingBody: ChatCompletionRequest; facts: ResponsesFacts } {
  if (scoped && typeof body === 'object' && body !== null && Object.hasOwn(body, 'request_id')) {
    throw new RouterError(
      'ROUTER_ERR_INVALID_REQUEST',
      '`request_id` cannot be set on a Responses request: the router assigns response ids.',
      { param: 'request_id' },
    );
  }
  if (typeof body === 'object' && body !== null && (body as { background?: unknown }).background === true) {
    throw new RouterError(
      'ROUTER_ERR_INVALID_REQUEST',
      '`background: true` is not supported through this router: a background response runs on after its ' +
        'request ends, where the router can neither hold its backend slot nor settle its tokens. Send the ' +
        'request without `background` (with `stream: true` for early output).',
      { param: 'background' },
    );
  }
  const overLimit = checkResponsesLimits(body, limits);
  if (overLimit !== null)
    throw new RouterError('ROUTER_ERR_INVALID_REQUEST', overLimit.message, { param: overLimit.param });
  const request = validateBody(ResponsesRequest, body);
  return {
    routingBody: responsesRoutingBody(request),
    facts: { previousResponseId: request.previous_response_id ?? null, stores: request.store !== false },
  };
}
