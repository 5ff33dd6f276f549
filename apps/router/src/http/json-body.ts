import type { FastifyInstance } from 'fastify';
import { RouterError } from '../errors';

declare module 'fastify' {
  interface FastifyRequest {
    /** The request body exactly as received: forwarded unchanged to the backend. */
    rawBody?: Buffer;
  }
}

/**
 * Parses every request body as JSON while keeping the raw bytes, which are what gets forwarded (a proxy
 * must not re-serialise a body: engines accept fields we do not know). Any content type is accepted as
 * JSON, as engines do; an empty or malformed body is a 400 in the OpenAI error shape.
 */
export function registerJsonBodyParser(app: FastifyInstance, bodyLimitBytes: number): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: bodyLimitBytes }, (request, body, done) => {
    const raw = body as Buffer;
    request.rawBody = raw;
    if (raw.length === 0) return done(new RouterError('ROUTER_ERR_INVALID_JSON', 'The request body is empty; expected a JSON object.'), undefined);
    try {
      done(null, JSON.parse(raw.toString('utf8')));
    } catch (error) {
      done(new RouterError('ROUTER_ERR_INVALID_JSON', `The request body is not valid JSON: ${(error as Error).message}`), undefined);
    }
  });
}
