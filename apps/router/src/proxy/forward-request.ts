import { setTimeout as sleep } from 'node:timers/promises';
import type { ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import { estimatePrefillTokens, type RoutingPolicy, type RoutingRequest } from '@kvroute/routing';
import type { Dispatcher } from 'undici';
import type { Backend, BackendRegistry } from '../backends/backend-registry';
import { RouterError } from '../errors';
import type { RouterMetrics } from '../router-metrics';
import { chooseBackend, Lease, type RouteContext } from '../routing/route-request';
import { endToEndHeaders } from './hop-by-hop';
import { relayResponse } from './relay-response';
import type { UpstreamPools } from './upstream-pool';

export interface ForwardDeps {
  readonly registry: BackendRegistry;
  readonly upstreams: UpstreamPools;
  readonly routing: RouteContext;
  readonly metrics: RouterMetrics;
  readonly logger: FastifyBaseLogger;
  readonly maxAttempts: number;
  readonly retryBackoffMs: number;
}

export interface ForwardInput {
  /** Pool key: the requested model. */
  readonly pool: string;
  readonly backends: readonly Backend[];
  readonly policy: RoutingPolicy;
  readonly routingRequest: RoutingRequest;
  readonly method: 'POST';
  /** Path after the backend's base path, e.g. `/v1/chat/completions` (with query string). */
  readonly path: string;
  readonly body: Buffer;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly requestId: string;
  readonly stream: boolean;
  /** performance.now() when the request arrived. */
  readonly arrivedAtMs: number;
}

/** Upstream statuses that mean "this backend cannot take it now": try another one. */
const RETRYABLE_STATUS = new Set([429, 502, 503, 504]);

/**
 * Sends a request to the backend its policy chooses, retrying elsewhere before the first byte.
 *
 * Each try: eligible backends (pool minus open circuits minus backends that already failed this
 * request) → policy → lease + speculative prefix record → send. A connect error, a timeout before the
 * response headers, or a 429/502/503/504 releases the lease, counts against the backend's breaker and
 * tries another backend after a jittered backoff, never the same one. Once headers arrive the response
 * is relayed (relay-response.ts). The client going away aborts the upstream request at once. Throws a
 * RouterError only when nothing was sent to the client.
 */
export async function forwardRequest(deps: ForwardDeps, input: ForwardInput, response: ServerResponse): Promise<void> {
  const abort = new AbortController();
  const onClientGone = (): void => {
    if (!response.writableFinished) abort.abort();
  };
  response.once('close', onClientGone);
  const excluded = new Set<string>();
  const upstreamHeaders = endToEndHeaders(input.headers);
  upstreamHeaders['x-request-id'] = input.requestId;
  let lastFailure: RouterError | null = null;

  for (let attempt = 1; attempt <= deps.maxAttempts; attempt++) {
    const eligible = input.backends.filter((backend) => !excluded.has(backend.id) && backend.breaker.isAvailable());
    if (eligible.length === 0) break;
    const decidedAt = performance.now();
    const { decision } = await chooseBackend(deps.routing, input.pool, input.routingRequest, eligible, input.policy);
    if (decision.kind === 'rejected') break;
    const backend = eligible.find((candidate) => candidate.id === decision.backendId) as Backend;
    const lease = new Lease(deps.routing.state, input.pool, backend.id, `${input.requestId}#${attempt}`, (error) =>
      deps.logger.warn({ err: error, backend: backend.id }, 'lease release failed'),
    );
    const chosen = decision.scores.find((score) => score.backendId === backend.id);
    // Ownership is recorded only for policies that read it: nobody else looks at the prefix index.
    await deps.routing.state.reserve(
      input.pool,
      backend.id,
      lease.leaseId,
      input.policy.usesPrefixMatch ? input.routingRequest.blockHashes : [],
      estimatePrefillTokens(input.routingRequest, chosen?.matchBlocks ?? 0),
    );
    const totalBlocks = input.routingRequest.blockHashes.length;
    deps.metrics.recordDecision(input.policy.name, (performance.now() - decidedAt) / 1000, totalBlocks === 0 ? 0 : (chosen?.matchBlocks ?? 0) / totalBlocks);
    deps.logger.debug({ requestId: input.requestId, policy: input.policy.name, backend: backend.id, reason: decision.reason, attempt, scores: decision.scores }, 'routing decision');

    backend.breaker.onAttempt();
    let upstream: Dispatcher.ResponseData;
    try {
      upstream = await deps.upstreams.for(backend).request({
        method: input.method,
        path: backend.basePath + input.path,
        headers: upstreamHeaders,
        body: input.body,
        signal: abort.signal,
      });
    } catch (error) {
      lease.release();
      if (abort.signal.aborted) {
        deps.metrics.recordClientAbort(backend.id);
        return;
      }
      backend.breaker.onFailure();
      const failure = classifyTransportError(error, backend.id);
      deps.metrics.recordRetry(backend.id, failure.code === 'ROUTER_ERR_UPSTREAM_TIMEOUT' ? 'timeout' : 'connect');
      deps.logger.warn({ requestId: input.requestId, backend: backend.id, err: error, attempt }, 'upstream try failed before the first byte');
      lastFailure = failure;
      excluded.add(backend.id);
      if (!(await backoff(deps, attempt, abort.signal))) return;
      continue;
    }

    const othersLeft = input.backends.some((other) => other.id !== backend.id && !excluded.has(other.id) && other.breaker.isAvailable());
    if (RETRYABLE_STATUS.has(upstream.statusCode) && attempt < deps.maxAttempts && othersLeft) {
      await upstream.body.dump().catch(() => undefined);
      lease.release();
      backend.breaker.onFailure();
      deps.metrics.recordRetry(backend.id, `status-${upstream.statusCode}`);
      excluded.add(backend.id);
      if (!(await backoff(deps, attempt, abort.signal))) return;
      continue;
    }
    if (upstream.statusCode >= 500 || upstream.statusCode === 429) backend.breaker.onFailure();
    else backend.breaker.onSuccess();

    await relayResponse(
      {
        metrics: deps.metrics,
        logger: deps.logger,
      },
      {
        upstream,
        response,
        lease,
        backendId: backend.id,
        policyName: input.policy.name,
        reason: decision.reason,
        requestId: input.requestId,
        arrivedAtMs: input.arrivedAtMs,
        clientAborted: () => abort.signal.aborted,
      },
    );
    response.off('close', onClientGone);
    return;
  }
  response.off('close', onClientGone);
  if (lastFailure) throw lastFailure;
  throw new RouterError('ROUTER_ERR_NO_BACKEND', `No backend is available for model \`${input.pool}\` right now.`, { retryAfterSeconds: 1 });
}

function classifyTransportError(error: unknown, backendId: string): RouterError {
  const code = (error as { code?: string }).code ?? '';
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') {
    return new RouterError('ROUTER_ERR_UPSTREAM_TIMEOUT', `Backend ${backendId} did not answer in time.`, { cause: error });
  }
  return new RouterError('ROUTER_ERR_UPSTREAM_UNAVAILABLE', `Backend ${backendId} could not be reached (${code || 'transport error'}).`, { cause: error });
}

/** Full-jitter exponential backoff; false if the client went away meanwhile. */
async function backoff(deps: ForwardDeps, attempt: number, signal: AbortSignal): Promise<boolean> {
  const capMs = deps.retryBackoffMs * 2 ** (attempt - 1);
  const delayMs = deps.routing.random() * capMs;
  if (delayMs > 0) await sleep(delayMs, undefined, { signal }).catch(() => undefined);
  return !signal.aborted;
}
