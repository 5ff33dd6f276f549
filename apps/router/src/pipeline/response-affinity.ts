import type { FastifyBaseLogger } from 'fastify';
import type { BackendId, ResponseOwnerStore } from '@kvroute/routing';
import { RouterError } from '../errors';
import { ResponseIdWatch } from '../proxy/response-id-watch';
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
  readonly owners: ResponseOwnerStore;
  readonly logger: FastifyBaseLogger;
}

/**
 * The backend that stored the response `request` continues; null when it names none, or (open mode)
 * the map does not know it (expired, never learnt): prefix routing then, and the engine answers.
 *
 * With tenants (`scoped`), an id the map does not know in the caller's scope is refused here (404),
 * never forwarded: engines keep responses without any notion of tenant, so a prefix-routed guess could
 * land on the backend holding another tenant's response, and that engine would continue it.
 */
export async function previousResponseOwner(deps: ResponseAffinityDeps, request: ParsedRequest, scope: string, scoped: boolean): Promise<BackendId | null> {
  const previous = request.responses?.previousResponseId ?? null;
  if (previous === null) return null;
  const owner = await deps.owners.ownerOf(scope, previous);
  if (owner === null && scoped) throw new RouterError('ROUTER_ERR_RESPONSE_NOT_FOUND', `Response with id '${previous}' not found.`, { param: 'previous_response_id' });
  return owner;
}

/**
 * A head watch (RelayTarget.headWatch) that remembers which backend stored the response, for a
 * Responses request that asks for storing; null otherwise. The map's write starts while the chunk that
 * holds the id is still on its way to the client: on Redis it is queued before the client can have read
 * the id, so a follow-up sent to any replica at once finds it (Redis runs one connection's commands in
 * order, and the follow-up's read comes after the client read the id).
 */
export function responseIdWatch(deps: ResponseAffinityDeps, request: ParsedRequest, scope: string, backendId: BackendId): ((chunk: Buffer) => boolean) | null {
  if (request.responses?.stores !== true) return null;
  const watch = new ResponseIdWatch((responseId) => {
    deps.owners.remember(scope, responseId, backendId).catch((error: unknown) => deps.logger.debug({ err: error, backend: backendId }, 'response owner not remembered'));
  });
  return (chunk) => watch.feed(chunk);
}
