import type { ServerResponse } from 'node:http';
import type { FastifyBaseLogger } from 'fastify';
import type { RoutingPolicy, RoutingRequest } from '@kvroute/routing';
import type { Backend } from '../backends/backend-registry';
import { eligibleBackends } from '../backends/eligible-backends';
import { RouterError } from '../errors';
import type { RouterMetrics } from '../router-metrics';
import { Lease, trueMatchesFor, type RouteContext } from '../routing/route-request';
import { endToEndHeaders } from './hop-by-hop';
import { RelayHandler } from './relay-handler';
import type { UpstreamPools } from './upstream-pool';

export interface ForwardDeps {
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
  /** performance.now() when the request arrived. */
  readonly arrivedAtMs: number;
}

/**
 * Sends a request to the backend its policy chooses, retrying elsewhere before the first byte.
 *
 * Each try: eligible backends (pool minus open circuits minus backends that already failed this
 * request minus those the health poller reports unhealthy, failing open if that leaves none) →
 * policy → lease + speculative prefix record → send. A connect error, a timeout before the
 * response headers, or a 429/502/503/504 releases the lease, counts against the backend's breaker and
 * tries another backend after a jittered backoff, never the same one (on the last possible try a
 * retryable status is relayed as is). Once headers arrive the response is relayed by RelayHandler.
 * The client going away aborts the upstream request at once. Throws a RouterError only when nothing
 * was sent to the client.
 */
export async function forwardRequest(deps: ForwardDeps, input: ForwardInput, response: ServerResponse): Promise<void> {
  const excluded = new Set<string>();
  const upstreamHeaders = endToEndHeaders(input.headers);
  upstreamHeaders['x-request-id'] = input.requestId;
  let lastFailure: RouterError | null = null;

  for (let attempt = 1; attempt <= deps.maxAttempts; attempt++) {
    if (response.destroyed) return;
    const { eligible, failedOpen, engine } = eligibleBackends(input.backends, excluded, deps.routing.engineStates ?? null);
    if (eligible.length === 0) break;
    if (failedOpen) {
      deps.metrics.recordFailOpen(input.pool);
      deps.logger.warn({ requestId: input.requestId, pool: input.pool }, 'the health poller reports every available backend unhealthy: routing on the circuit breakers alone');
    }
    // The oracle's questions to the backends (benchmarks only) come before the decision clock starts:
    // they are the measuring instrument's cost, not a routing policy's.
    const asking = trueMatchesFor(deps.routing, input.policy, eligible, input.body);
    const trueMatchTokens = asking === undefined ? undefined : await asking;
    if (asking !== undefined && response.destroyed) return;
    const decidedAt = performance.now();
    const leaseId = `${input.requestId}#${attempt}`;
    // Decide, take the lease, record ownership: one step (one Redis round trip for atomic rules).
    const { decision, candidates, conflicts, ruleMismatch } = await deps.routing.state.decide({
      pool: input.pool,
      request: input.routingRequest,
      backends: eligible.map((backend) => backend.info),
      policy: input.policy,
      context: { nowMs: deps.routing.nowMs(), random: deps.routing.random },
      leaseId,
      engine,
      ...(trueMatchTokens === undefined ? {} : { trueMatchTokens }),
    });
    for (const conflicted of conflicts) deps.metrics.recordReserveConflict(conflicted);
    if (decision.kind === 'rejected') break;
    const backend = eligible.find((candidate) => candidate.id === decision.backendId) as Backend;
    const lease = new Lease({
      state: deps.routing.state,
      pool: input.pool,
      backendId: backend.id,
      leaseId,
      onError: (error) => deps.logger.warn({ err: error, backend: backend.id }, 'lease call failed'),
      book: deps.routing.heldLeases,
      heldBlocksAtFirstToken: input.policy.usesPrefixMatch && input.policy.recordsOwnershipAtFirstToken === true ? input.routingRequest.blockHashes : [],
    });
    if (ruleMismatch) {
      deps.metrics.recordRuleMismatch(input.policy.name);
      deps.logger.warn({ requestId: input.requestId, policy: input.policy.name, backend: backend.id, candidates }, 'the atomic rule and the policy chose different backends on the same figures');
    }
    const chosen = candidates.find((candidate) => candidate.backend.id === backend.id);
    lease.startRenewing(deps.routing.leaseRenewIntervalMs);
    const totalBlocks = input.routingRequest.blockHashes.length;
    deps.metrics.recordDecision(input.policy.name, (performance.now() - decidedAt) / 1000, totalBlocks === 0 ? 0 : (chosen?.matchBlocks ?? 0) / totalBlocks);
    // Built only when debug is on: this runs for every request.
    if (deps.logger.level === 'debug' || deps.logger.level === 'trace') {
      deps.logger.debug({ requestId: input.requestId, policy: input.policy.name, backend: backend.id, reason: decision.reason, attempt, conflicts: conflicts.length, scores: decision.scores }, 'routing decision');
    }

    const othersLeft = input.backends.some((other) => other.id !== backend.id && !excluded.has(other.id) && other.breaker.isAvailable());
    const handler = new RelayHandler({
      response,
      lease,
      backendId: backend.id,
      policyName: input.policy.name,
      reason: decision.reason,
      requestId: input.requestId,
      arrivedAtMs: input.arrivedAtMs,
      mayRetryStatus: attempt < deps.maxAttempts && othersLeft,
      metrics: deps.metrics,
      logger: deps.logger,
    });
    backend.breaker.onAttempt();
    deps.upstreams.for(backend).dispatch({ method: input.method, path: backend.basePath + input.path, headers: upstreamHeaders, body: input.body }, handler);
    const outcome = await handler.outcome;
    if (outcome.kind === 'done') {
      if (handler.clientWentAway) return;
      const status = response.statusCode;
      if (status >= 500 || status === 429) backend.breaker.onFailure();
      else backend.breaker.onSuccess();
      return;
    }
    backend.breaker.onFailure();
    deps.metrics.recordRetry(backend.id, outcome.cause);
    if (outcome.error) {
      deps.logger.warn({ requestId: input.requestId, backend: backend.id, err: outcome.error, attempt }, 'upstream try failed before the first byte');
      lastFailure =
        outcome.cause === 'timeout'
          ? new RouterError('ROUTER_ERR_UPSTREAM_TIMEOUT', `Backend ${backend.id} did not answer in time.`, { cause: outcome.error })
          : new RouterError('ROUTER_ERR_UPSTREAM_UNAVAILABLE', `Backend ${backend.id} could not be reached (${(outcome.error as { code?: string }).code ?? 'transport error'}).`, { cause: outcome.error });
    }
    excluded.add(backend.id);
    if (!(await backoff(deps, attempt, response))) return;
  }
  if (lastFailure) throw lastFailure;
  throw new RouterError('ROUTER_ERR_NO_BACKEND', `No backend is available for model \`${input.pool}\` right now.`, { retryAfterSeconds: 1 });
}

/** Full-jitter exponential backoff; false if the client went away meanwhile. */
async function backoff(deps: ForwardDeps, attempt: number, response: ServerResponse): Promise<boolean> {
  const capMs = deps.retryBackoffMs * 2 ** (attempt - 1);
  const delayMs = deps.routing.random() * capMs;
  if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
  return !response.destroyed;
}
