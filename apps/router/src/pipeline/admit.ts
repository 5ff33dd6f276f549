import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { RouterError } from '../errors';
import type { RequestDrain } from '../http/request-drain';
import type { Authenticator, Identity } from '../tenants/authenticate';
import { isProxiedPath } from './passthrough-paths';

declare module 'fastify' {
  interface FastifyRequest {
    /** Who sent the request (tenants/authenticate.ts); null in open mode. Set by admit for `/v1/*`. */
    identity: Identity | null;
  }
}

/**
 * Stage 1 of the request path, **admit**: whether the router takes a request at all, decided from the
 * request line and the connection before a byte of the body is read, so refusing costs next to nothing.
 *
 * - Paths that could mean something else to a backend than to the router are refused (400): a `..` or
 *   `.` segment, an empty segment (`//`), a backslash, or an encoded dot, slash or backslash
 *   (`%2e`, `%2f`, `%5c`). The router forwards paths as they are, so it must never forward one whose
 *   meaning depends on who normalises it.
 * - Once the shutdown grace has passed, new requests are refused (503, retry elsewhere).
 * - Caps (503 + `Retry-After`, before the body is read): at most `maxInflightRequests` proxied requests
 *   in flight, and requests arriving on a connection beyond the first `maxConnections` open ones (that
 *   connection is closed after the answer). Probes and metrics are never capped: a busy router must
 *   still say it is alive.
 * - Identity, for every `/v1/*` request (tenants/authenticate.ts): 401 without a valid API key (or
 *   gateway identity) when `auth` is not `none`; the identity rides on the request to the limit stage.
 */
export interface AdmitOptions {
  readonly drain: RequestDrain;
  /** Proxied requests (`POST /v1/*`) in flight at once; beyond it 503. */
  readonly maxInflightRequests: number;
  /** Open client connections served; requests on later ones get 503 and `Connection: close`. */
  readonly maxConnections: number;
  readonly authenticator: Authenticator;
}

/** Registers the admit stage (an `onRequest` hook, the first thing that runs for a request). */
export function registerAdmit(app: FastifyInstance, options: AdmitOptions): void {
  app.decorateRequest('identity', null);
  let inflight = 0;
  let connections = 0;
  const overCap = new WeakSet<Socket>();
  app.server.on('connection', (socket: Socket) => {
    connections++;
    if (connections > options.maxConnections) overCap.add(socket);
    socket.once('close', () => {
      connections--;
    });
  });

  app.addHook('onRequest', (request, reply, done) => {
    // A refused request's body is never read, so its connection cannot carry another request: close it.
    const refuse = (error: RouterError): void => {
      reply.header('connection', 'close');
      done(error);
    };
    const unsafe = unsafePathReason(request.raw.url ?? '/');
    if (unsafe !== null)
      return refuse(new RouterError('ROUTER_ERR_INVALID_PATH', `The request path is not accepted: ${unsafe}.`));
    if (!isProxiedPath(request.url)) return done();
    if (request.method !== 'POST') return identify();
    if (options.drain.phase === 'aborting')
      return refuse(
        new RouterError('ROUTER_ERR_SHUTTING_DOWN', 'This router is shutting down; retry.', { retryAfterSeconds: 1 }),
      );
    if (overCap.has(request.raw.socket)) {
      return refuse(
        new RouterError(
          'ROUTER_ERR_OVERLOADED',
          `This router serves at most ${options.maxConnections} connections; retry.`,
          { retryAfterSeconds: 1 },
        ),
      );
    }
    if (inflight >= options.maxInflightRequests) {
      return refuse(
        new RouterError('ROUTER_ERR_OVERLOADED', `This router has ${inflight} requests in flight, its limit; retry.`, {
          retryAfterSeconds: 1,
        }),
      );
    }
    inflight++;
    reply.raw.once('close', () => {
      inflight--;
    });
    identify();

    function identify(): void {
      if (options.authenticator.mode === 'none') return done();
      options.authenticator.authenticate(request.headers, request.raw.socket.remoteAddress ?? 'unknown').then(
        (identity) => {
          request.identity = identity;
          done();
        },
        (error: unknown) =>
          refuse(
            error instanceof RouterError
              ? error
              : new RouterError('ROUTER_ERR_INTERNAL', 'Internal router error.', { cause: error }),
          ),
      );
    }
  });
}

/** Encoded `.`, `/` or `\`: a backend that decodes before routing would see another path. */
const ENCODED_SEPARATOR = /%(?:2e|2f|5c)/i;

/** Why `url`'s path is refused, or null if it is a plain, normalised path. The query is not looked at. */
export function unsafePathReason(url: string): string | null {
  const query = url.indexOf('?');
  const path = query === -1 ? url : url.slice(0, query);
  if (!path.startsWith('/')) return 'it must start with /';
  if (path.includes('\\')) return 'it contains a backslash';
  if (ENCODED_SEPARATOR.test(path)) return 'it contains an encoded dot, slash or backslash';
  const segments = path.split('/');
  // segments[0] is the empty string before the leading slash; a trailing slash leaves one empty last segment.
  for (let index = 1; index < segments.length; index++) {
    const segment = segments[index];
    if (segment === '.' || segment === '..') return 'it contains a dot segment';
    if (segment === '' && index < segments.length - 1) return 'it contains an empty segment (//)';
  }
  return null;
}
