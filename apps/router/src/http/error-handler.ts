import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { RouterError } from '../errors';
import type { RouterMetrics } from '../router-metrics';

/**
 * Turns every error the router raises into the OpenAI error shape with the right status. Fastify's own
 * errors (body too large, bad content length, …) keep their 4xx status; anything unexpected is a 500
 * that is logged, never a crash.
 */
export function registerErrorHandler(app: FastifyInstance, metrics: RouterMetrics): void {
  app.setErrorHandler((error: FastifyError | RouterError, request, reply) => {
    const routerError = toRouterError(error);
    if (routerError.code === 'ROUTER_ERR_INTERNAL') request.log.error({ err: error }, 'unexpected error');
    metrics.recordRejected(routerError.code);
    if (routerError.options.retryAfterSeconds !== undefined)
      reply.header('retry-after', String(routerError.options.retryAfterSeconds));
    if (routerError.options.headers !== undefined) reply.headers(routerError.options.headers);
    return reply
      .code(routerError.status)
      .header('x-router-backend', 'none')
      .header('x-router-reason', 'rejected')
      .send(routerError.toBody());
  });
  app.setNotFoundHandler((request, reply) => {
    const error = new RouterError(
      'ROUTER_ERR_NOT_FOUND',
      `No route for ${request.method} ${request.url.split('?')[0]}.`,
    );
    metrics.recordRejected(error.code);
    return reply
      .code(404)
      .header('x-router-backend', 'none')
      .header('x-router-reason', 'rejected')
      .send(error.toBody());
  });
}

function toRouterError(error: FastifyError | RouterError): RouterError {
  if (error instanceof RouterError) return error;
  const status = error.statusCode ?? 500;
  if (status === 413)
    return new RouterError('ROUTER_ERR_BODY_TOO_LARGE', 'The request body is larger than this router accepts.');
  if (status === 415) return new RouterError('ROUTER_ERR_UNSUPPORTED_MEDIA_TYPE', error.message);
  if (status >= 400 && status < 500) return new RouterError('ROUTER_ERR_INVALID_REQUEST', error.message);
  return new RouterError('ROUTER_ERR_INTERNAL', 'Internal router error.', { cause: error });
}

/**
 * Fastify's `frameworkErrors`: what its router refuses before any hook or handler runs, a path that does
 * not percent-decode (`%ZZ`, an encoded lone surrogate: FST_ERR_BAD_URL) or a path parameter longer than
 * `maxParamLength` (FST_ERR_MAX_PARAM_LENGTH, e.g. a 10 KB response id). Fastify's own answer is not the
 * OpenAI error shape, echoes the whole path and says 414 for the second: both become a 400 here, with a
 * message that does not repeat the path.
 */
export function createFrameworkErrorHandler(
  metrics: RouterMetrics,
): (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => void {
  return (error, _request, reply) => {
    const routerError =
      error.code === 'FST_ERR_MAX_PARAM_LENGTH'
        ? new RouterError(
            'ROUTER_ERR_INVALID_PATH',
            'The request path is not accepted: a path parameter (a response id) is too long.',
          )
        : error.code === 'FST_ERR_BAD_URL'
          ? new RouterError(
              'ROUTER_ERR_INVALID_PATH',
              'The request path is not accepted: it is not valid percent-encoded UTF-8.',
            )
          : toRouterError(error);
    metrics.recordRejected(routerError.code);
    void reply
      .code(routerError.status)
      .header('x-router-backend', 'none')
      .header('x-router-reason', 'rejected')
      .send(routerError.toBody());
  };
}

/**
 * Answers an error on a reply handed over to the proxy (hijacked: Fastify's error handler no longer
 * sees it) as that handler would: counted by code, in the OpenAI shape, anything unexpected a logged
 * 500. Nothing is written once the response has started (its relay ended it) or the client has gone.
 */
export function answerHijackedError(
  reply: FastifyReply,
  error: unknown,
  metrics: RouterMetrics,
  showsRoutingHeaders: boolean,
): void {
  const routerError =
    error instanceof RouterError
      ? error
      : new RouterError('ROUTER_ERR_INTERNAL', 'Internal router error.', { cause: error });
  if (!(error instanceof RouterError)) reply.request.log.error({ err: error }, 'unexpected error while forwarding');
  metrics.recordRejected(routerError.code);
  const response = reply.raw;
  if (response.headersSent || response.destroyed) return;
  const body = JSON.stringify(routerError.toBody());
  const headers: Record<string, string> = {
    'content-type': 'application/json; charset=utf-8',
    'content-length': String(Buffer.byteLength(body)),
    'x-request-id': reply.request.id,
  };
  if (showsRoutingHeaders) {
    headers['x-router-backend'] = 'none';
    headers['x-router-reason'] = 'rejected';
  }
  const { retryAfterSeconds, headers: extraHeaders } = routerError.options;
  if (retryAfterSeconds !== undefined) headers['retry-after'] = String(retryAfterSeconds);
  if (extraHeaders !== undefined) Object.assign(headers, extraHeaders);
  response.writeHead(routerError.status, headers);
  response.end(body);
}
