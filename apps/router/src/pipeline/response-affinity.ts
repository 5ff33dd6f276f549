import type { FastifyBaseLogger } from 'fastify';
import type { BackendId } from '@kvroute/routing';
import { RouterError } from '../errors';
import { ResponseIdWatch } from '../proxy/response-id-watch';
import type { RouterMetrics } from '../router-metrics';
import type { ResponseOwnerMap } from '../routing/response-owners';
import type { ParsedRequest } from './parse';

/**
 * Responses API affinity, for the route and learn stages: which backend holds the response a request
 * continues (read once per request, before its first try), and the id of a response a backend is
 * storing (read from the response's head as it is relayed, and remembered for every replica).
 *
 * Scope: the tenant's (or team's) cache scope when tenants are on, '' in open mode (TenantDirectory
 * `cacheScopeOf`): one tenant's ids are never found in another's scope.
 */
export interface ResponseAffinityDeps {
  readonly owners: ResponseOwnerMap;
  readonly logger: FastifyBaseLogger;
  /** Counts the map's writes (`kvroute_router_response_owner_writes_total`). */
  readonly metrics: Pick<RouterMetrics, 'recordResponseOwnerWrite'>;
}

/** Seconds a client is told to wait when the owner map cannot be asked: about the failover's probe interval. */
const OWNERS_RETRY_AFTER_SECONDS = 1;

/**
 * The backend that stored the response `request` continues; null when it names none, or (open mode)
 * the map does not know it (expired, never learnt) or cannot be asked now (Redis failed or degraded,
 * and this replica never learnt it): prefix routing then, and the engine answers.
 *
 * With tenants (`scoped`), an id the map does not know in the caller's scope is refused here (404),
 * never forwarded: engines keep responses without any notion of tenant, so a prefix-routed guess could
 * land on the backend holding another tenant's response, and that engine would continue it. When the
 * map cannot be asked (`unknown`), the id may well be the caller's, learnt by another replica: a 503
 * with Retry-After, which a client retries, not a 404 it would take as final.
 */
export async function previousResponseOwner(
  deps: ResponseAffinityDeps,
  request: ParsedRequest,
  scope: string,
  scoped: boolean,
): Promise<BackendId | null> {
  const previous = request.responses?.previousResponseId ?? null;
  if (previous === null) return null;
  const found = await deps.owners.lookup(scope, previous);
  if (found.kind === 'found') return found.backendId;
  if (!scoped) return null;
  if (found.kind === 'unknown') throw ownersUnavailable(previous, 'previous_response_id');
  throw new RouterError('ROUTER_ERR_RESPONSE_NOT_FOUND', `Response with id '${previous}' not found.`, {
    param: 'previous_response_id',
  });
}

/** The 503 for a response whose owner cannot be looked up now (Redis failed or degraded). */
export function ownersUnavailable(responseId: string, param: string): RouterError {
  return new RouterError(
    'ROUTER_ERR_RESPONSE_OWNERS_UNAVAILABLE',
    `Which backend stored response '${responseId}' cannot be looked up right now; retry shortly.`,
    {
      param,
      retryAfterSeconds: OWNERS_RETRY_AFTER_SECONDS,
    },
  );
}

/**
 * A head watch (RelayedRequest.headWatch) that remembers which backend stored the response, for a
 * Responses request that asks for storing; null otherwise. The map's write starts while the chunk that
 * holds the id is still on its way to the client: on Redis it is queued before the client can have read
 * the id, so a follow-up sent to any replica at once finds it (Redis runs one connection's commands in
 * order, and the follow-up's read comes after the client read the id).
 */
export function responseIdWatch(
  deps: ResponseAffinityDeps,
  request: ParsedRequest,
  scope: string,
  backendId: BackendId,
): ((chunk: Buffer) => boolean) | null {
  if (request.responses?.stores !== true) return null;
  const watch = new ResponseIdWatch((responseId) => {
    deps.owners.remember(scope, responseId, backendId).then(
      () => deps.metrics.recordResponseOwnerWrite(true),
      (error: unknown) => {
        deps.metrics.recordResponseOwnerWrite(false);
        // A warning: the client holds an id other replicas cannot find (with tenants they answer its
        // follow-ups 503 while Redis is away and 404 after; in open mode they prefix-route them).
        deps.logger.warn(
          { err: error, backend: backendId, responseId },
          'response owner not written to the shared map: only this replica knows it',
        );
      },
    );
  });
  return (chunk) => watch.feed(chunk);
}
