import { randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Endpoint } from '../pipeline/parse';
import { ROOT_PASSTHROUGH_PATHS } from '../pipeline/passthrough-paths';

export interface GenerationRoutesOptions {
  /** The request path's handler per endpoint (pipeline/request-path.ts). */
  readonly handlerFor: (endpoint: Endpoint) => (request: FastifyRequest, reply: FastifyReply) => Promise<void>;
}

/**
 * `POST /v1/chat/completions`, `POST /v1/completions`, `POST /v1/responses` (OpenAI Responses) and
 * `POST /v1/messages` (Anthropic; validated, routed by the configured policy) and every other
 * `POST /v1/*` plus vLLM's tokenizer and pooling paths outside /v1/ (embeddings, audio, tokenize, …:
 * passed through by the pass-through policy), each run through the request path; and `GET /v1/*`
 * besides the router's own GET routes, passed through the same way.
 */
export async function generationRoutes(app: FastifyInstance, options: GenerationRoutesOptions): Promise<void> {
  app.post('/v1/chat/completions', options.handlerFor('chat'));
  app.post('/v1/completions', options.handlerFor('completions'));
  app.post('/v1/messages', options.handlerFor('messages'));
  app.post('/v1/responses', options.handlerFor('responses'));
  app.post('/v1/*', options.handlerFor('passthrough'));
  // GET of the engine's other `/v1/*` resources (files, batches, …: the official clients' `list` calls);
  // `/v1/models` and a stored response's GET are the router's own (models-routes.ts, responses-routes.ts).
  app.get('/v1/*', options.handlerFor('passthrough'));
  // vLLM's tokenizer and pooling endpoints outside /v1/ (pipeline/passthrough-paths.ts).
  for (const path of ROOT_PASSTHROUGH_PATHS) app.post(path, options.handlerFor('passthrough'));
}

/** Request ids: the client's `X-Request-Id` when it sent a sane one, else a new UUID. Echoed and logged; never a lease id. */
export function requestIdFrom(header: string | string[] | undefined): string {
  return typeof header === 'string' && /^[\w.:-]{1,128}$/.test(header) ? header : randomUUID();
}
