import type { FastifyInstance } from 'fastify';
import { ChatCompletionRequest, CompletionRequest } from '@kvroute/protocols';
import { buildRoutingRequest, type RoutingPolicy } from '@kvroute/routing';
import type { BackendRegistry } from '../backends/backend-registry';
import { RouterError } from '../errors';
import { eligibleBackends } from '../backends/eligible-backends';
import { dryRunDecision, type RouteContext } from '../routing/route-request';
import { parseBody, sessionKeyOf } from './generation-routes';

/**
 * `POST /debug/route` (only with `debugRoutes: true`): explains where a request body would go, without
 * sending it or changing any state: per-backend match, in-flight, score and exclusions.
 */
export async function debugRoutes(
  app: FastifyInstance,
  options: { registry: BackendRegistry; routing: RouteContext; policyFor: (pool: string, kind: 'generation') => RoutingPolicy; blockSizeBytes: number },
): Promise<void> {
  app.post('/debug/route', async (request) => {
    const raw = request.body as Record<string, unknown> | null;
    const body = raw && typeof raw === 'object' && 'messages' in raw ? parseBody(ChatCompletionRequest, raw) : parseBody(CompletionRequest, raw);
    const backends = options.registry.poolFor(body.model);
    if (!options.registry.servesModel(body.model)) throw new RouterError('ROUTER_ERR_MODEL_NOT_FOUND', `The model \`${body.model}\` does not exist.`, { param: 'model' });
    const routingRequest = buildRoutingRequest(body, { blockSizeBytes: options.blockSizeBytes, sessionKey: sessionKeyOf(request.headers, body) });
    // The same eligibility as a real request's first try: breakers, the health poller, fail-open.
    const eligibility = eligibleBackends(backends, new Set(), options.routing.engineStates ?? null);
    const policy = options.policyFor(body.model, 'generation');
    const { decision } =
      eligibility.eligible.length === 0
        ? { decision: { kind: 'rejected' as const, reason: 'no-eligible-backend' as const } }
        : await dryRunDecision(options.routing, body.model, routingRequest, request.rawBody ?? Buffer.from(JSON.stringify(raw)), eligibility, policy);
    return {
      policy: policy.name,
      scoreDirection: policy.scoreDirection,
      blockSizeBytes: routingRequest.blockSizeBytes,
      textBytes: routingRequest.textBytes,
      blocks: routingRequest.blockHashes.length,
      contextBlocks: routingRequest.contextBlocks,
      breakers: Object.fromEntries(backends.map((backend) => [backend.id, backend.breaker.state])),
      decision,
    };
  });
}
