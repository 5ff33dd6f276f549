import type { ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import type { BackendId } from '@kvroute/routing';
import { RouterError } from '../errors';
import type { TryOutcome } from '../proxy/relay-handler';
import type { RouterMetrics } from '../router-metrics';
import type { Ticket } from './route';

/**
 * Retry before the engine started, wrapped around route and send as an undici interceptor wraps
 * dispatch: route a try (skipping the backends this request already tried), send it; if the backend
 * is not running it (connect error, a 429/503 refusal while another try is possible, a connection lost
 * at once), the try's
 * backend is excluded and, after a full-jitter exponential backoff, the next try is routed. At most
 * `maxAttempts` tries; never the same backend twice. The client going away ends it.
 *
 * A backend that closed the connection without answering soon after the request went out
 * (`connection-lost` within `connectionLostRetryMs`) is running nothing: that is retried too. A request
 * that failed later before anything reached the client (its deadline passed, or the connection was lost
 * after it may have run for long: `failed`) is not re-run: the backend may be running it still, or have
 * run it for minutes, and another try would cost that again. Its error is answered at once (504, 502).
 *
 * Throws a RouterError only when nothing was sent to the client: a sent try's failure, the last
 * connect failure, or `ROUTER_ERR_NO_BACKEND` when no backend was left to try.
 */
export interface RetryOptions {
  readonly maxAttempts: number;
  /** Base backoff, ms: try k waits uniformly in [0, retryBackoffMs · 2^(k-1)). */
  readonly retryBackoffMs: number;
  readonly random: () => number;
  readonly metrics: RouterMetrics;
  readonly logger: FastifyBaseLogger;
}

/** Routes one try of the request `of`: a ticket, or null when no backend is left. */
export type RouteTry<Request> = (of: Request, tried: ReadonlySet<BackendId>, attempt: number) => Promise<Ticket | null>;
/** Sends one ticket; `mayRetryStatus`: a retryable status may be turned into a retry. */
export type SendTry<Request> = (of: Request, ticket: Ticket, mayRetryStatus: boolean) => Promise<TryOutcome>;

/** What the wrapper reads of a pool: which backends another try could still go to. */
export interface RetryPool {
  readonly model: string;
  readonly backends: readonly { readonly id: BackendId; readonly breaker: { isAvailable(): boolean } }[];
}

/** Built once; the returned function runs per request (no closures per request on the hot path). */
export function withRetryBeforeFirstByte<Request>(
  options: RetryOptions,
  routeTry: RouteTry<Request>,
  sendTry: SendTry<Request>,
) {
  return async function routeAndSend(
    of: Request,
    pool: RetryPool,
    requestId: string,
    response: ServerResponse,
  ): Promise<void> {
    const tried = new Set<BackendId>();
    let lastFailure: RouterError | null = null;
    for (let attempt = 1; attempt <= options.maxAttempts; attempt++) {
      if (response.destroyed) return;
      const ticket = await routeTry(of, tried, attempt);
      if (ticket === null) break;
      const backendId = ticket.backend.id;
      const othersLeft = pool.backends.some(
        (other) => other.id !== backendId && !tried.has(other.id) && other.breaker.isAvailable(),
      );
      const outcome = await sendTry(of, ticket, attempt < options.maxAttempts && othersLeft);
      if (outcome.kind === 'done') return;
      if (outcome.kind === 'failed') {
        options.logger.warn(
          { requestId, backend: backendId, err: outcome.error, attempt },
          'upstream try failed after it was sent: not retried',
        );
        throw upstreamFailureError(outcome.cause, outcome.error);
      }
      options.metrics.recordRetry(backendId, outcome.cause);
      if (outcome.error) {
        options.logger.warn(
          { requestId, backend: backendId, err: outcome.error, attempt },
          'upstream try failed before the first byte',
        );
        lastFailure = upstreamFailureError(outcome.cause, outcome.error);
      }
      tried.add(backendId);
      if (!(await backoff(options, attempt, response))) return;
    }
    if (lastFailure) throw lastFailure;
    throw new RouterError('ROUTER_ERR_NO_BACKEND', `No backend is available for model \`${pool.model}\` right now.`, {
      retryAfterSeconds: 1,
    });
  };
}

/**
 * The answer to a try that failed before anything reached the client: 504 for its deadline, 502 else.
 * The message names no backend (ids are the operator's: the try's log line carries it).
 */
export function upstreamFailureError(cause: string, error: Error): RouterError {
  if (cause === 'timeout')
    return new RouterError(
      'ROUTER_ERR_UPSTREAM_TIMEOUT',
      `The model server did not answer in time (${error.message}).`,
      {
        cause: error,
      },
    );
  const code = (error as { code?: string }).code ?? 'transport error';
  return cause === 'connect'
    ? new RouterError('ROUTER_ERR_UPSTREAM_UNAVAILABLE', `The model server could not be reached (${code}).`, {
        cause: error,
      })
    : new RouterError('ROUTER_ERR_UPSTREAM_UNAVAILABLE', `The model server failed before answering (${code}).`, {
        cause: error,
      });
}

/** Full-jitter exponential backoff; false if the client went away meanwhile. */
async function backoff(options: RetryOptions, attempt: number, response: ServerResponse): Promise<boolean> {
  const capMs = options.retryBackoffMs * 2 ** (attempt - 1);
  const delayMs = options.random() * capMs;
  if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
  return !response.destroyed;
}
