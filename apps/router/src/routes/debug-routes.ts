import type { AdapterRouting } from '../lora/adapter-routing';
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { RouterError } from '../errors';
import { parseRequest, type Endpoint, type ParseOptions } from '../pipeline/parse';
import { estimatePrefillTokens, type RoutingDecision } from '@kvroute/routing';
import type { Backend } from '../backends/backend-registry';
import { splitPool } from '../pipeline/disaggregation';
import type { ParsedRequest } from '../pipeline/parse';
import type { PrefillDeps } from '../pipeline/prefill';
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

const DEBUG_ENDPOINTS: readonly Endpoint[] = ['chat', 'completions', 'responses', 'messages'];

/**
 * Which endpoint's parse a dry-run body goes through: `?endpoint=chat|completions|responses|messages`,
 * else guessed from the body. Chat and Anthropic Messages bodies both carry `messages` but are routed on
 * different text (Messages adds its top-level `system`), so a body with `system`, or a request with an
 * `anthropic-version` header, is a Messages one. A Responses body has `input` (and no `prompt`); its owner
 * map is not consulted here.
 */
function debugEndpointOf(request: FastifyRequest): Endpoint {
  const asked = (request.query as Record<string, unknown> | undefined)?.['endpoint'];
  if (asked !== undefined) {
    if (typeof asked === 'string' && (DEBUG_ENDPOINTS as readonly string[]).includes(asked)) return asked as Endpoint;
    throw new RouterError('ROUTER_ERR_INVALID_REQUEST', `endpoint must be one of ${DEBUG_ENDPOINTS.join(', ')}.`, {
      param: 'endpoint',
    });
  }
  const raw = request.body;
  if (raw === null || typeof raw !== 'object') return 'completions';
  if ('messages' in raw)
    return 'system' in raw || request.headers['anthropic-version'] !== undefined ? 'messages' : 'chat';
  return 'input' in raw && !('prompt' in raw) ? 'responses' : 'completions';
}

/**
 * `POST /debug/route` (only with `debugRoutes: true`): explains where a request body would go, without
 * sending it or changing any state: per-backend match, in-flight, score and exclusions, the cost-model
 * figures in use (configured or learned from responses) and each backend's learned retention. The body goes
 * through the request path's own parse stage, so it is routed on exactly what a real request is; which
 * endpoint's parse, see `debugEndpointOf`.
 */
export async function debugRoutes(
  app: FastifyInstance,
  options: {
    route: RouteDeps;
    parse: ParseOptions;
    learned: LearnedFigures;
    prefill?: PrefillDeps;
    adapters?: AdapterRouting | null;
  },
): Promise<void> {
  app.post('/debug/route', async (request) => {
    const endpoint = debugEndpointOf(request);
    const asParsed = await parseRequest(endpoint, request, options.parse);
    const pool = options.adapters?.poolFor(asParsed.model) ?? poolOf(options.route.registry, asParsed.model);
    // An adapter's request is explained as routed: in its base model's pool, its adapter's waits priced (`adapterMs`).
    const base = options.adapters?.baseOf(asParsed.model) ?? null;
    const parsed = base === null ? asParsed : await (options.adapters as AdapterRouting).resolve(asParsed, pool, base);
    const split =
      options.prefill === undefined
        ? { routed: pool, prefill: null }
        : splitPool(pool, endpoint, options.prefill.settings.protocol);
    const backends = split.routed;
    const { routingRequest } = parsed;
    // The same eligibility as a real request's first try: breakers, the health poller, fail-open.
    const { policy, decision, cell } = await explainRoute(options.route, parsed, backends);
    const prefill =
      split.prefill === null || options.prefill === undefined || decision.kind !== 'routed'
        ? null
        : await explainPrefill(options.prefill, parsed, split.prefill, decision);
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
      // A disaggregated model's request: whether it would be split, and the prefill backend's decision.
      ...(prefill === null ? {} : { prefill }),
    };
  });
}

/** The prefill leg's dry run: the tokens the decode backend lacks, whether that splits, and where leg 1 would go. */
async function explainPrefill(
  deps: PrefillDeps,
  parsed: ParsedRequest,
  prefillPool: readonly Backend[],
  decode: Extract<RoutingDecision, { kind: 'routed' }>,
): Promise<Record<string, unknown>> {
  const matchBlocks = decode.scores.find((score) => score.backendId === decode.backendId)?.matchBlocks ?? 0;
  const lackingTokens = estimatePrefillTokens(
    parsed.routingRequest,
    matchBlocks,
    deps.settings.bytesPerToken(parsed.model),
  );
  const pool = prefillPool.filter((backend) => backend.id !== decode.backendId);
  const leg = await explainRoute(deps.route, parsed, pool);
  return {
    protocol: deps.settings.protocol,
    lackingTokens,
    minUncachedTokens: deps.settings.minUncachedTokens,
    split: lackingTokens >= deps.settings.minUncachedTokens && pool.length > 0,
    policy: leg.policy.name,
    decision: leg.decision,
  };
}
