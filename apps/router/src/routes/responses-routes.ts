import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { RouterError } from '../errors';
import type { StoredResponseMethod } from '../pipeline/stored-response';

export interface ResponsesRoutesOptions {
  /** The stored-response path's handler per method (pipeline/stored-response.ts). */
  readonly handlerFor: (
    method: StoredResponseMethod,
  ) => (request: FastifyRequest, reply: FastifyReply) => Promise<void>;
}

/**
 * A stored response's `GET /v1/responses/{id}`, `DELETE /v1/responses/{id}` and
 * `POST /v1/responses/{id}/cancel`, each sent to the backend that stored it (pipeline/stored-response.ts).
 */
export async function responsesRoutes(app: FastifyInstance, options: ResponsesRoutesOptions): Promise<void> {
  // None takes a body: an empty one with a content type is none (pipeline/parse.ts).
  const noBody = { config: { emptyBodyAllowed: true } };
  app.get('/v1/responses/:id', noBody, options.handlerFor('GET'));
  app.delete('/v1/responses/:id', noBody, options.handlerFor('DELETE'));
  app.post('/v1/responses/:id/cancel', noBody, options.handlerFor('POST'));
  // Any other POST under /v1/responses/ (an id longer than a response id may be, which the path router
  // does not match as `:id`; extra segments) would otherwise fall to the pass-through `/v1/*` and be
  // prefix-routed to any backend, lease and all, past the owner map: refused here instead.
  app.post('/v1/responses/*', async (request) => {
    throw new RouterError(
      'ROUTER_ERR_NOT_FOUND',
      `No route for POST ${request.url.split('?')[0]?.slice(0, 256)}: a stored response is cancelled at /v1/responses/{id}/cancel, its id 1 to 128 characters.`,
      {
        param: 'response_id',
      },
    );
  });
  // Likewise for GET (`/v1/responses/{id}/input_items`, …), which the pass-through `GET /v1/*` would
  // send to any backend: there it could read another tenant's stored response past the owner map.
  app.get<{ Params: { '*': string } }>('/v1/responses/*', async (request) => {
    // One segment here is an id too long for the `:id` route: refused as an invalid id, as the path router did.
    if (!request.params['*'].includes('/'))
      throw new RouterError('ROUTER_ERR_INVALID_REQUEST', 'The response id is 1 to 128 characters.', {
        param: 'response_id',
      });
    throw new RouterError(
      'ROUTER_ERR_NOT_FOUND',
      `No route for GET ${request.url.split('?')[0]?.slice(0, 256)}: a stored response is read at /v1/responses/{id}, its id 1 to 128 characters.`,
      { param: 'response_id' },
    );
  });
}
