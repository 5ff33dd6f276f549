import { randomUUID } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ChatCompletionRequest, CompletionRequest } from '@kvroute/protocols';
import { buildRoutingRequest, type RoutingPolicy, type RoutingRequest } from '@kvroute/routing';
import type { z } from 'zod';
import type { BackendRegistry } from '../backends/backend-registry';
import { RouterError } from '../errors';
import { forwardRequest, type ForwardDeps } from '../proxy/forward-request';

export interface GenerationRoutesOptions {
  readonly registry: BackendRegistry;
  readonly forward: ForwardDeps;
  /** The policy instance for a pool (one per pool and endpoint kind, created on first use). */
  readonly policyFor: (pool: string, kind: 'generation' | 'passthrough') => RoutingPolicy;
  readonly blockSizeBytes: number;
  /** True once the shutdown grace has passed: requests still arriving are refused (503, retry elsewhere). */
  readonly refusesRequests: () => boolean;
}

/**
 * `POST /v1/chat/completions` and `POST /v1/completions` (validated, routed by the configured policy)
 * and every other `POST /v1/*` (embeddings, …: passed through by the pass-through policy).
 */
export async function generationRoutes(app: FastifyInstance, options: GenerationRoutesOptions): Promise<void> {
  app.post('/v1/chat/completions', (request, reply) => route(request, reply, parseBody(ChatCompletionRequest, request.body), 'generation'));
  app.post('/v1/completions', (request, reply) => route(request, reply, parseBody(CompletionRequest, request.body), 'generation'));
  app.post('/v1/*', (request, reply) => {
    const body = request.body as Record<string, unknown> | null;
    if (body === null || typeof body !== 'object' || Array.isArray(body)) {
      throw new RouterError('ROUTER_ERR_INVALID_REQUEST', 'The request body must be a JSON object.');
    }
    if (typeof body.model !== 'string' || body.model === '') throw new RouterError('ROUTER_ERR_INVALID_REQUEST', '`model` is required.', { param: 'model' });
    return route(request, reply, { model: body.model }, 'passthrough');
  });

  async function route(
    request: FastifyRequest,
    reply: FastifyReply,
    body: { model: string; user?: string | undefined },
    kind: 'generation' | 'passthrough',
  ): Promise<void> {
    if (options.refusesRequests()) throw new RouterError('ROUTER_ERR_SHUTTING_DOWN', 'This router is shutting down; retry.', { retryAfterSeconds: 1 });
    if (!options.registry.servesModel(body.model)) {
      throw new RouterError('ROUTER_ERR_MODEL_NOT_FOUND', `The model \`${body.model}\` does not exist.`, { param: 'model' });
    }
    // Drained backends are in no pool: a model whose backends are all drained exists but has nowhere to go.
    const backends = options.registry.poolFor(body.model);
    if (backends.length === 0) {
      throw new RouterError('ROUTER_ERR_NO_BACKEND', `No backend is available for model \`${body.model}\` right now.`, { retryAfterSeconds: 1 });
    }
    const sessionKey = sessionKeyOf(request.headers, body);
    const routingRequest: RoutingRequest =
      kind === 'generation'
        ? buildRoutingRequest(body as ChatCompletionRequest | CompletionRequest, { blockSizeBytes: options.blockSizeBytes, sessionKey })
        : passthroughRoutingRequest(body.model, sessionKey, options.blockSizeBytes);
    reply.hijack();
    try {
      await forwardRequest(
        options.forward,
        {
          pool: body.model,
          backends,
          policy: options.policyFor(body.model, kind),
          routingRequest,
          method: 'POST',
          path: request.url,
          body: request.rawBody ?? Buffer.alloc(0),
          headers: request.headers,
          requestId: request.id,
          arrivedAtMs: request.arrivedAtMs,
        },
        reply.raw,
      );
    } catch (error) {
      const routerError = error instanceof RouterError ? error : new RouterError('ROUTER_ERR_INTERNAL', 'Internal router error.', { cause: error });
      options.forward.metrics.recordRejected(routerError.code);
      writeErrorAfterHijack(reply, routerError);
      if (!(error instanceof RouterError)) request.log.error({ err: error }, 'unexpected error while forwarding');
    }
  }
}

/** The reply was handed over to the proxy; errors found before anything was sent are written here. */
function writeErrorAfterHijack(reply: FastifyReply, error: RouterError): void {
  const response = reply.raw;
  if (response.headersSent || response.destroyed) return;
  const body = JSON.stringify(error.toBody());
  const headers: Record<string, string> = {
    'content-type': 'application/json; charset=utf-8',
    'content-length': String(Buffer.byteLength(body)),
    'x-router-backend': 'none',
    'x-router-reason': 'rejected',
    'x-request-id': reply.request.id,
  };
  if (error.options.retryAfterSeconds !== undefined) headers['retry-after'] = String(error.options.retryAfterSeconds);
  response.writeHead(error.status, headers);
  response.end(body);
}

function passthroughRoutingRequest(model: string, sessionKey: string | null, blockSizeBytes: number): RoutingRequest {
  return { model, blockHashes: [], blockSizeBytes, textBytes: 0, contextBlocks: 0, headHash: 0, sessionKey };
}

export function parseBody<Schema extends z.ZodType>(schema: Schema, body: unknown): z.infer<Schema> {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new RouterError('ROUTER_ERR_INVALID_REQUEST', 'The request body must be a JSON object.');
  }
  const result = schema.safeParse(body);
  if (!result.success) {
    const issue = result.error.issues[0];
    const where = issue && issue.path.length > 0 ? issue.path.join('.') : 'body';
    const details = result.error.issues.map((item) => `${item.path.join('.') || 'body'}: ${item.message}`).join('; ');
    throw new RouterError('ROUTER_ERR_INVALID_REQUEST', `Invalid request: ${details}`, { param: where });
  }
  return result.data;
}

/** The affinity key of a request: its `X-Session-Id` header, else the body's `user`, else none. */
export function sessionKeyOf(headers: FastifyRequest['headers'], body: { user?: string | undefined }): string | null {
  const header = headers['x-session-id'];
  if (typeof header === 'string' && header !== '') return header;
  return body.user !== undefined && body.user !== '' ? body.user : null;
}

/** Request ids: the client's `X-Request-Id` when it sent a sane one, else a new UUID. */
export function requestIdFrom(header: string | string[] | undefined): string {
  return typeof header === 'string' && /^[\w.:-]{1,128}$/.test(header) ? header : randomUUID();
}
