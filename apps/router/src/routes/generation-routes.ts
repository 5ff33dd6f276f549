import { randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Endpoint } from '../pipeline/parse';

export interface GenerationRoutesOptions {
  /** The request path's handler per endpoint (pipeline/request-path.ts). */
  readonly handlerFor: (endpoint: Endpoint) => (request: FastifyRequest, reply: FastifyReply) => Promise<void>;
}

/**
 * `POST /v1/chat/completions`, `POST /v1/completions` and `POST /v1/responses` (validated, routed by the configured policy)
 * and every other `POST /v1/*` (embeddings, …: passed through by the pass-through policy), each run
 * through the request path.
 */
export async function generationRoutes(app: FastifyInstance, options: GenerationRoutesOptions): Promise<void> {
  app.post('/v1/chat/completions', options.handlerFor('chat'));
  app.post('/v1/completions', options.handlerFor('completions'));
  app.post('/v1/responses', options.handlerFor('responses'));
  app.post('/v1/*', options.handlerFor('passthrough'));
}

/** Request ids: the client's `X-Request-Id` when it sent a sane one, else a new UUID. Echoed and logged; never a lease id. */
export function requestIdFrom(header: string | string[] | undefined): string {
  return typeof header === 'string' && /^[\w.:-]{1,128}$/.test(header) ? header : randomUUID();
}
