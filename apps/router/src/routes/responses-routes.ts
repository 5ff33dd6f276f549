import type { Socket } from 'node:net';
import { pipeline } from 'node:stream/promises';
import type { FastifyBaseLogger, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Dispatcher } from 'undici';
import { RESPONSE_ID_PATTERN } from '@kvroute/protocols';
import type { BackendRegistry } from '../backends/backend-registry';
import { RouterError } from '../errors';
import { ownersUnavailable } from '../pipeline/response-affinity';
import { clientResponseHeaders, upstreamRequestHeaders } from '../proxy/header-hygiene';
import type { UpstreamPools } from '../proxy/upstream-pool';
import type { ResponseOwnerMap } from '../routing/response-owners';
import type { TenantDirectory } from '../tenants/tenant-directory';

export interface ResponsesRoutesOptions {
  readonly owners: ResponseOwnerMap;
  readonly registry: BackendRegistry;
  readonly upstreams: UpstreamPools;
  readonly tenants: TenantDirectory;
  readonly logger: FastifyBaseLogger;
  /**
   * The longest the router waits for a backend's headers on these calls, ms (config `streamFirstByteTimeoutMs`);
   * capped at STORED_RESPONSE_HEADERS_TIMEOUT_MS.
   */
  readonly headersTimeoutMs: number;
}

/**
 * A stored response's GET, DELETE or cancel is a dictionary read on the engine, answered at once unless
 * the engine is stuck: it gets 30 s to its headers, not the minutes a stream's prefill may take.
 */
export const STORED_RESPONSE_HEADERS_TIMEOUT_MS = 30_000;

type ResponseMethod = 'GET' | 'DELETE' | 'POST';

/**
 * `GET /v1/responses/{id}`, `DELETE /v1/responses/{id}` and `POST /v1/responses/{id}/cancel`: sent to
 * the backend that stored the response, found in the response-owner map in the caller's cache scope
 * (pipeline/response-affinity.ts). Nothing to route: no policy, lease or limit (a stored response is
 * read, not generated). An id the map does not know, or whose backend is no longer in the fleet, is a
 * 404 in the OpenAI error shape (vLLM's message): only that backend could have answered. An id the map
 * cannot look up now (Redis failed or degraded, and this replica never learnt it) is a 503 with
 * Retry-After in every mode: there is no prefix to route a GET on, and a 404 would be a guess a client
 * takes as final. A successful DELETE forgets the id.
 */
export async function responsesRoutes(app: FastifyInstance, options: ResponsesRoutesOptions): Promise<void> {
  // None takes a body: an empty one with a content type is none (pipeline/parse.ts).
  const noBody = { config: { emptyBodyAllowed: true } };
  app.get('/v1/responses/:id', noBody, (request, reply) => forward(options, 'GET', request, reply));
  app.delete('/v1/responses/:id', noBody, (request, reply) => forward(options, 'DELETE', request, reply));
  app.post('/v1/responses/:id/cancel', noBody, (request, reply) => forward(options, 'POST', request, reply));
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
}

async function forward(
  options: ResponsesRoutesOptions,
  method: ResponseMethod,
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<void> {
  // The client leaving (its connection closed before the response ended) aborts the upstream call, so
  // no request is left running on the engine for nobody; a response already sent ends with no abort.
  const clientGone = new AbortController();
  const onClose = (): void => {
    if (!reply.raw.writableFinished) clientGone.abort(new Error('the client went away'));
  };
  reply.raw.once('close', onClose);
  const id = (request.params as { id: string }).id;
  if (!RESPONSE_ID_PATTERN.test(id))
    throw new RouterError(
      'ROUTER_ERR_INVALID_REQUEST',
      'The response id is 1 to 128 characters of letters, digits, `_`, `.`, `:` or `-`.',
      { param: 'response_id' },
    );
  const scope = request.identity === null ? '' : options.tenants.cacheScopeOf(request.identity.tenant);
  const found = await options.owners.lookup(scope, id);
  if (found.kind === 'unknown') throw ownersUnavailable(id, 'response_id');
  const backend = found.kind === 'absent' ? undefined : options.registry.get(found.backendId);
  if (backend === undefined)
    throw new RouterError('ROUTER_ERR_RESPONSE_NOT_FOUND', `Response with id '${id}' not found.`, {
      param: 'response_id',
    });
  const socket = request.raw.socket as Socket & { encrypted?: boolean };
  const headers = upstreamRequestHeaders(
    request.headers,
    { peerAddress: socket.remoteAddress ?? 'unknown', proto: socket.encrypted === true ? 'https' : 'http' },
    options.upstreams.authorizationOf(backend),
  );
  headers['x-request-id'] = request.id;
  // The body (a cancel's, usually none) is forwarded as it came; GET and DELETE carry none.
  const body = method === 'POST' ? (request.rawBody ?? null) : null;
  if (clientGone.signal.aborted) return void reply.hijack();
  const headersTimeout = Math.min(options.headersTimeoutMs, STORED_RESPONSE_HEADERS_TIMEOUT_MS);
  let upstream: Dispatcher.ResponseData;
  try {
    upstream = await options.upstreams.for(backend).request({
      method,
      path: backend.basePath + request.url,
      headers,
      body,
      headersTimeout,
      signal: clientGone.signal,
    });
  } catch (error) {
    // Nobody to answer: the abort was ours.
    if (clientGone.signal.aborted) return void reply.hijack();
    if ((error as { code?: string }).code === 'UND_ERR_HEADERS_TIMEOUT') {
      throw new RouterError(
        'ROUTER_ERR_UPSTREAM_TIMEOUT',
        `Backend ${backend.id}, which stored response '${id}', did not answer within ${headersTimeout} ms.`,
        { cause: error },
      );
    }
    throw new RouterError(
      'ROUTER_ERR_UPSTREAM_UNAVAILABLE',
      `Backend ${backend.id}, which stored response '${id}', did not answer.`,
      { cause: error },
    );
  }
  if (method === 'DELETE' && upstream.statusCode < 300) {
    await options.owners
      .forget(scope, id)
      .catch((error: unknown) => options.logger.debug({ err: error }, 'response owner not forgotten'));
  }
  reply.hijack();
  const outgoing = clientResponseHeaders(upstream.headers as Record<string, string | string[] | undefined>);
  outgoing['x-request-id'] = request.id;
  reply.raw.writeHead(upstream.statusCode, outgoing);
  await pipeline(upstream.body, reply.raw).catch((error: unknown) =>
    options.logger.debug({ err: error, backend: backend.id }, 'stored response relay ended early'),
  );
}
