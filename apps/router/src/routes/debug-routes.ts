import type { FastifyInstance } from 'fastify';
import { parseRequest, type ParseOptions } from '../pipeline/parse';
import { explainRoute, poolOf, type RouteDeps } from '../pipeline/route';
import type { PoolCostModel } from '../routing/policy-table';

/** What responses taught this replica (the learn stage), as /debug/route shows it. */
export interface LearnedFigures {
  /** The pool's cost-model figures: configured, learned (value and samples) and in use. */
  costModel(pool: string): PoolCostModel;
  /** A backend's learned retention, ms (null: none learned; its entries last the idle TTL). */
  retentionMs(backendId: string): number | null;
  /** Whether a backend's responses have carried cached tokens (its predictions are checked). */
  reportsCachedTokens(backendId: string): boolean;
}

/**
 * `POST /debug/route` (only with `debugRoutes: true`): explains where a request body would go, without
 * sending it or changing any state: per-backend match, in-flight, score and exclusions, the cost-model
 * figures in use (configured or learned from responses) and each backend's learned retention. The body goes
 * through the request path's own parse stage, so it is routed on exactly what a real request is.
 */
export async function debugRoutes(app: FastifyInstance, options: { route: RouteDeps; parse: ParseOptions; learned: LearnedFigures }): Promise<void> {
  app.post('/debug/route', async (request) => {
    const raw = request.body;
    const isObject = raw !== null && typeof raw === 'object';
    // A Responses body has `input` (and no `messages` or `prompt`); its owner map is not consulted here.
    const endpoint = isObject && 'messages' in raw ? 'chat' : isObject && 'input' in raw && !('prompt' in raw) ? 'responses' : 'completions';
    const parsed = await parseRequest(endpoint, request, options.parse);
    const backends = poolOf(options.route.registry, parsed.model);
    const { routingRequest } = parsed;
    // The same eligibility as a real request's first try: breakers, the health poller, fail-open.
    const { policy, decision, cell } = await explainRoute(options.route, parsed, backends);
    return {
      policy: policy.name,
      scoreDirection: policy.scoreDirection,
      blockSizeBytes: routingRequest.blockSizeBytes,
      textBytes: routingRequest.textBytes,
      blocks: routingRequest.blockHashes.length,
      contextBlocks: routingRequest.contextBlocks,
      // A pool split into cells (poolCells): the cell this request is decided in; null otherwise.
      cell,
      breakers: Object.fromEntries(backends.map((backend) => [backend.id, backend.breaker.state])),
      costModel: options.learned.costModel(parsed.model),
      retentionMs: Object.fromEntries(backends.map((backend) => [backend.id, options.learned.retentionMs(backend.id)])),
      decision,
    };
  });
}
