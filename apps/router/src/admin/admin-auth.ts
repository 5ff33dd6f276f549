import { createHash, timingSafeEqual } from 'node:crypto';
import type { FastifyBaseLogger, FastifyInstance, FastifyRequest } from 'fastify';
import { RouterError } from '../errors';
import { limitedPeerOf, type AuthFailureLimiter } from './auth-failure-limiter';

/**
 * The admin listener's gate, before any route or body: a blocked peer gets 429 + Retry-After (even with
 * the right token: it is still guessing), a missing or wrong `Authorization: Bearer` gets 401 and counts as
 * a failure. Unknown paths are gated too, so the listener does not tell which routes exist. The token is
 * never logged: failures log the peer and the outcome only.
 */
export function registerAdminAuth(
  app: FastifyInstance,
  options: { token: string; limiter: AuthFailureLimiter; audit: FastifyBaseLogger },
): void {
  const expectedDigest = digest(options.token);
  app.addHook('onRequest', async (request, reply) => {
    const peer = peerOf(request);
    const limitedAs = limitedPeerOf(peer);
    const blockedForSeconds = options.limiter.retryAfterSeconds(limitedAs);
    if (blockedForSeconds !== null) {
      throw new RouterError(
        'ROUTER_ERR_ADMIN_AUTH_RATE_LIMITED',
        'Too many wrong admin tokens from this address; try again later.',
        { retryAfterSeconds: blockedForSeconds },
      );
    }
    if (isAuthorized(request, expectedDigest)) return;
    options.limiter.recordFailure(limitedAs);
    options.audit.warn(
      { peer, method: request.method, path: request.url.split('?')[0], outcome: 'unauthorized' },
      'admin: wrong or missing token',
    );
    reply.header('www-authenticate', 'Bearer realm="kvroute-admin"');
    throw new RouterError('ROUTER_ERR_UNAUTHORIZED', 'The admin API needs `Authorization: Bearer <adminToken>`.');
  });
}

/** The TCP peer (no X-Forwarded-For: the admin listener trusts no proxy header). */
export function peerOf(request: FastifyRequest): string {
  return request.socket.remoteAddress ?? 'unknown';
}

/** Compared as SHA-256 digests: equal lengths for timingSafeEqual, and no timing hint of the token's length. */
function digest(text: string): Buffer {
  return createHash('sha256').update(text, 'utf8').digest();
}

function isAuthorized(request: FastifyRequest, expectedDigest: Buffer): boolean {
  const header = request.headers.authorization;
  if (typeof header !== 'string') return false;
  const match = /^Bearer\s+(\S+)\s*$/i.exec(header);
  return match !== null && timingSafeEqual(digest(match[1] as string), expectedDigest);
}
