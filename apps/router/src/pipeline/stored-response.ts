import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify';
import { RESPONSE_ID_PATTERN } from '@kvroute/protocols';
import type { Backend, BackendRegistry } from '../backends/backend-registry';
import { RouterError } from '../errors';
import { answerHijackedError } from '../http/error-handler';
import { clientHopOf } from '../proxy/header-hygiene';
import type { RelayEvents, TryDeadline } from '../proxy/relay-handler';
import type { RouterMetrics } from '../router-metrics';
import type { ResponseOwnerMap } from '../routing/response-owners';
import type { TenantDirectory } from '../tenants/tenant-directory';
import { ownersUnavailable } from './response-affinity';
import { upstreamFailureError } from './retry-before-first-byte';
import { send, type SendDeps } from './send';
import { searchStoredResponse, type StoredResponseSearch } from './stored-response-search';

/**
 * A stored response's GET, DELETE or cancel is a dictionary read on the engine, answered at once unless
 * the engine is stuck: it gets 30 s to its headers, not the minutes a stream's prefill may take.
 */
export const STORED_RESPONSE_HEADERS_TIMEOUT_MS = 30_000;

/** The metrics' `reason` (and `X-Router-Reason`) of a stored-response call: its backend is the response's owner. */
export const STORED_RESPONSE_REASON = 'response-owner';
/** The metrics' `policy` of a stored-response call: no policy chose its backend. */
const NO_POLICY = 'none';
/** The metrics' `model` of a stored-response call: it names none. */
const NO_MODEL = '';
/** Seconds a client is told to wait when the owner's circuit is open: about a breaker cooldown's probe. */
const OPEN_CIRCUIT_RETRY_AFTER_SECONDS = 1;

export type StoredResponseMethod = 'GET' | 'DELETE' | 'POST';

export interface StoredResponseDeps {
  readonly owners: ResponseOwnerMap;
  readonly registry: BackendRegistry;
  readonly tenants: TenantDirectory;
  /** The request path's send stage: the same pools, hop headers, relay, breaker and metrics. */
  readonly send: SendDeps;
  /** Until the backend's headers (TryDeadlines.storedResponse). */
  readonly deadline: TryDeadline;
  readonly metrics: RouterMetrics;
  readonly logger: FastifyBaseLogger;
  /** Open mode's search of the backends for an id the map does not know (stored-response-search.ts); absent: none, 404. */
  readonly search?: StoredResponseSearch;
}

/** Nothing to learn from a GET's or cancel's answer. */
const NO_EVENTS: RelayEvents = { firstOutput: () => undefined, finished: () => undefined };

/**
 * `GET /v1/responses/{id}`, `DELETE /v1/responses/{id}` and `POST /v1/responses/{id}/cancel`, sent to
 * the backend that stored the response, found in the response-owner map in the caller's cache scope
 * (pipeline/response-affinity.ts), then through the send stage like every other request: the backend's
 * circuit breaker counts the call and, open, refuses it (503 + Retry-After: no other engine holds the
 * response); the deadline is the backend's headers (`streamFirstByteTimeoutMs`, at most
 * STORED_RESPONSE_HEADERS_TIMEOUT_MS: 504 past it); the relay counts it in the request metrics (policy
 * `none`, reason `response-owner`, model ''). Nothing to route or limit: no policy, lease or tenant
 * limit (a stored response is read, not generated), and only its owner could answer, so no retry.
 *
 * An id the map does not know, or whose backend is no longer in the fleet, is a 404 in the OpenAI error
 * shape (vLLM's message); in open mode, the backends are asked first (stored-response-search.ts: the
 * first to answer 200 is the owner, remembered in the map). An id the map cannot look up now (Redis failed or degraded, and this replica
 * never learnt it) is a 503 with Retry-After in every mode: there is no prefix to route a GET on, and a
 * 404 would be a guess a client takes as final. A successful DELETE forgets the id.
 */
export function createStoredResponsePath(
  deps: StoredResponseDeps,
): (method: StoredResponseMethod) => (request: FastifyRequest, reply: FastifyReply) => Promise<void> {
  return (method) => async (request, reply) => {
    const id = (request.params as { id: string }).id;
    if (!RESPONSE_ID_PATTERN.test(id))
      throw new RouterError(
        'ROUTER_ERR_INVALID_REQUEST',
        'The response id is 1 to 128 characters of letters, digits, `_`, `.`, `:` or `-`.',
        { param: 'response_id' },
      );
    const scope = request.identity === null ? '' : deps.tenants.cacheScopeOf(request.identity.tenant);
    const backend = await ownerOf(deps, scope, id, request.identity === null);
    reply.hijack();
    const outcome = await send(
      deps.send,
      {
        backend,
        method,
        path: request.url,
        headers: request.headers,
        clientHop: clientHopOf(request.raw),
        // A cancel's body (usually none) is forwarded as it came; GET and DELETE carry none.
        body: method === 'POST' ? (request.rawBody ?? null) : null,
        requestId: request.id,
        arrivedAtMs: request.arrivedAtMs,
        reason: STORED_RESPONSE_REASON,
        policyName: NO_POLICY,
        model: NO_MODEL,
        mayRetryStatus: false,
        deadline: deps.deadline,
        readsUsage: false,
        readsUsageAtStart: false,
        stripsStreamUsage: false,
        showsRoutingHeaders: false,
        extraHeaders: null,
        headWatch: null,
        events: method === 'DELETE' ? forgetWhenDeleted(deps, scope, id) : NO_EVENTS,
      },
      reply.raw,
    );
    if (outcome.kind === 'done') return;
    const error = outcome.error ?? new Error(`the backend refused it (${outcome.cause})`);
    answerHijackedError(reply, upstreamFailureError(outcome.cause, error), deps.metrics, false);
  };
}

/** The backend that stored response `id` in `scope`, if it is in the fleet and its circuit lets a call through; else throws (404, 503). */
async function ownerOf(deps: StoredResponseDeps, scope: string, id: string, openMode: boolean): Promise<Backend> {
  const found = await deps.owners.lookup(scope, id);
  if (found.kind === 'unknown') throw ownersUnavailable(id, 'response_id');
  let backend = found.kind === 'absent' ? undefined : deps.registry.get(found.backendId);
  if (backend === undefined && openMode && deps.search !== undefined) {
    backend = (await searchStoredResponse(deps.search, searchableBackends(deps.registry), id)) ?? undefined;
    // Found: remembered, so the next call (on any replica sharing the map) goes straight there.
    if (backend !== undefined)
      deps.owners
        .remember(scope, id, backend.id)
        .catch((error: unknown) => deps.logger.debug({ err: error }, 'searched response owner not remembered'));
  }
  if (backend === undefined)
    throw new RouterError('ROUTER_ERR_RESPONSE_NOT_FOUND', `Response with id '${id}' not found.`, {
      param: 'response_id',
    });
  if (!backend.breaker.isAvailable())
    throw new RouterError(
      'ROUTER_ERR_NO_BACKEND',
      `The model server that stored response '${id}' is failing (its circuit is open); retry shortly.`,
      { retryAfterSeconds: OPEN_CIRCUIT_RETRY_AFTER_SECONDS },
    );
  return backend;
}

/** The backends a search asks: undrained, their circuit closed (an open one could not be sent to anyway). */
function searchableBackends(registry: BackendRegistry): readonly Backend[] {
  return registry.backends.filter((backend) => !registry.isDrained(backend.id) && backend.breaker.isAvailable());
}

/**
 * A DELETE's events: its success (a 2xx, whose head is its only output: RelayEvents.firstOutput with a
 * whole response) forgets the id. The forget starts before that head is written to the client, as a
 * learnt id's write does (response-affinity.ts responseIdWatch): on Redis it is queued before the client
 * can read the answer, so a GET sent to any replica afterwards no longer finds the id.
 */
function forgetWhenDeleted(deps: StoredResponseDeps, scope: string, id: string): RelayEvents {
  return {
    firstOutput: () => {
      deps.owners
        .forget(scope, id)
        .catch((error: unknown) => deps.logger.debug({ err: error }, 'response owner not forgotten'));
    },
    finished: () => undefined,
  };
}
