import { randomUUID } from 'node:crypto';
import type { FastifyBaseLogger } from 'fastify';
import {
  decide,
  explainDecision,
  type Prediction,
  type BackendId,
  type BlockHash,
  type DecideInput,
  type RoutingDecision,
  type RoutingPolicy,
  type RoutingStateStore,
} from '@kvroute/routing';
import type { Backend, BackendRegistry } from '../backends/backend-registry';
import { eligibleBackends, type Eligibility } from '../backends/eligible-backends';
import type { EngineStateView } from '../backends/engine-state-view';
import { RouterError } from '../errors';
import type { RouterMetrics } from '../router-metrics';
import type { HeldLeases } from '../routing/held-leases';
import { Lease } from '../routing/lease';
import type { ParsedRequest } from './parse';

/**
 * Stage 5 of the request path, **route**: where one try goes. It decides and reserves, and hands back
 * one ticket; it sends nothing (send does, knowing nothing of routing).
 *
 * One try: eligible backends (the pool minus backends this request already tried, open circuits and
 * those the health poller reports unhealthy, failing open if that leaves none) → `decide` (the policy
 * evaluated once: in Redis for policies with an atomic rule, else on a snapshot; the lease taken and,
 * for policies that record at routing, ownership recorded, in the same step) → the ticket.
 */
export interface RouteDeps {
  readonly registry: BackendRegistry;
  readonly state: RoutingStateStore;
  /** The policy instance for a pool (one per pool and endpoint kind, created on first use). */
  readonly policyFor: (pool: string, kind: ParsedRequest['kind']) => RoutingPolicy;
  readonly nowMs: () => number;
  readonly random: () => number;
  /** How often a held lease is renewed (shared state expires unrenewed leases); 0 = never. */
  readonly leaseRenewIntervalMs: number;
  /** How long a stream's prefill-done waits to ride on its release (Lease `prefillDoneDelayMs`); 0 = at once. */
  readonly prefillDoneDelayMs: number;
  /**
   * A non-streaming request's prefill leaves the backlog this many times its estimated prefill time after it
   * was routed (Lease `clearBacklogAfter`); 0 = at its response.
   */
  readonly nonStreamingPrefillDoneFactor: number;
  /** The health poller's view of the backends (health, engine load); null without a poller's Redis. */
  readonly engineStates: EngineStateView | null;
  readonly heldLeases: HeldLeases;
  readonly metrics: RouterMetrics;
  readonly logger: FastifyBaseLogger;
}

type RoutedDecision = Extract<RoutingDecision, { kind: 'routed' }>;

/** One try's reservation: the chosen backend, why, and the lease held on it until `release`. */
export interface Ticket {
  readonly backend: Backend;
  readonly decision: RoutedDecision;
  readonly policyName: string;
  readonly lease: Lease;
  /** The prefix the decision believed the backend holds, which the response's usage confirms or not (learn). */
  readonly prediction: Prediction;
  /** What learn compares the response with besides the prediction. */
  readonly routed: RoutedFigures;
}

/** The chosen backend's figures when the try was routed, for learn's corrections and calibration. */
export interface RoutedFigures {
  readonly pool: string;
  /** Wall-clock ms of the decision (the shared state's clock). */
  readonly atMs: number;
  /** The request's chain, as routed (leading blocks only: maxRoutedBlocks). */
  readonly blockHashes: readonly BlockHash[];
  /**
   * When the chosen backend's deepest matched block was recorded, ms on the state's clock, as read
   * by the decision (null: no match). The evidence learn's overprediction correction ages
   * (`atMs - matchRecordedAtMs`): by the response, this request's own recording has refreshed it.
   */
  readonly matchRecordedAtMs: number | null;
  /** Requests in flight on the chosen backend before this one, fleet-wide. */
  readonly inflightAhead: number;
  /** Prefill tokens sent to the chosen backend and not started, before this one. */
  readonly pendingAheadTokens: number;
}

/**
 * A model no backend serves: 503 with Retry-After while a backend may still report it (its models are
 * pending), else 404. For a request (poolOf) and for `GET /v1/models/{id}` alike. The name is capped in
 * the message (a hostile 10 KB id is not echoed).
 */
export function unknownModelError(registry: BackendRegistry, model: string): RouterError {
  const name = model.slice(0, 256);
  if (registry.modelsPending()) {
    return new RouterError(
      'ROUTER_ERR_MODELS_PENDING',
      `No backend has reported model \`${name}\` yet; some backends have not yet told their models. Retry shortly.`,
      {
        param: 'model',
        retryAfterSeconds: 1,
      },
    );
  }
  return new RouterError('ROUTER_ERR_MODEL_NOT_FOUND', `The model \`${name}\` does not exist.`, { param: 'model' });
}

/**
 * A request's pool: the backends serving its model. Throws (404, 503) before anything was sent. A model
 * no backend reports is 404 only once every backend has told its models: before, it may be served by
 * one that is still starting (503 + Retry-After: a client retries it, and never sees a false 404).
 * Only undrained backends added less than modelsPendingMaxMs ago count (registry.modelsPending): one
 * that never answers (mistyped, crash-looping) must not turn every unknown model into endless retries.
 */
export function poolOf(registry: BackendRegistry, model: string): readonly Backend[] {
  if (!registry.servesModel(model)) throw unknownModelError(registry, model);
  // Drained backends are in no pool: a model whose backends are all drained exists but has nowhere to go.
  const backends = registry.poolFor(model);
  if (backends.length === 0)
    throw new RouterError('ROUTER_ERR_NO_BACKEND', `No backend is available for model \`${model}\` right now.`, {
      retryAfterSeconds: 1,
    });
  return backends;
}

/**
 * One try of `request` over `pool`, skipping `tried`: a ticket, or null when no backend is left.
 * `owner`: the backend that stored the response a Responses request continues (`previous_response_id`,
 * pipeline/response-affinity.ts), or null. While it is eligible the try goes there (the policy decides
 * over it alone, so the lease and ownership are taken as for any decision; reason `previous-response`);
 * gone, drained or its circuit open, the request is routed as any other, reason
 * `previous-response-fallback` (the engine it reaches will answer 404 unless storage is shared); tried
 * already by this request (it failed before the first byte), no other try is made.
 */
export async function route(
  deps: RouteDeps,
  request: ParsedRequest,
  pool: readonly Backend[],
  tried: ReadonlySet<BackendId>,
  attempt: number,
  requestId: string,
  owner: BackendId | null = null,
): Promise<Ticket | null> {
  // The owner was tried and failed before the first byte: no other engine holds the conversation (it
  // would answer 404), so the try's own failure is the answer (a 502/504; a busy owner's 429/503 is
  // relayed by send, which request-path.ts tells not to retry a refusal from the owner).
  if (owner !== null && tried.has(owner)) return null;
  const { eligibility, pinned } = tryEligibility(deps, request.model, pool, tried, owner, requestId);
  if (eligibility.eligible.length === 0) return null;
  const policy = deps.policyFor(request.model, request.kind);
  const decidedAt = performance.now();
  // A lease id of the router's own per try: a client's X-Request-Id is the client's to choose (ten
  // streams sent with one id are ten requests in flight).
  const leaseId = randomUUID();
  const input = decideInput(deps, request, eligibility, policy, leaseId);
  const decided = await decide(deps.state, input);
  const { candidates, conflicts, blocksAtFirstOutput } = decided;
  for (const conflicted of conflicts) deps.metrics.recordReserveConflict(conflicted);
  if (decided.decision.kind === 'rejected') return null;
  const decision: RoutedDecision =
    owner === null
      ? decided.decision
      : { ...decided.decision, reason: pinned === undefined ? 'previous-response-fallback' : 'previous-response' };
  const backend = eligibility.eligible.find((candidate) => candidate.id === decision.backendId) as Backend;
  const lease = heldLease(deps, request.model, backend.id, leaseId, blocksAtFirstOutput);
  const prefillEndMs = request.stream ? null : estimatedPrefillEndMs(decision, backend.id);
  // Never sooner than a stream's prefill-done would go (prefillDoneDelayMs): a response that ends by then clears it
  // with its release, in one call, as a short stream does.
  if (prefillEndMs !== null && deps.nonStreamingPrefillDoneFactor > 0)
    lease.clearBacklogAfter(Math.max(prefillEndMs * deps.nonStreamingPrefillDoneFactor, deps.prefillDoneDelayMs));
  const totalBlocks = request.routingRequest.blockHashes.length;
  const chosen = candidates.find((candidate) => candidate.backend.id === backend.id);
  deps.metrics.recordDecision(
    policy.name,
    (performance.now() - decidedAt) / 1000,
    totalBlocks === 0 ? 0 : (chosen?.matchBlocks ?? 0) / totalBlocks,
  );
  // Built only when debug is on: this runs for every request.
  if (deps.logger.level === 'debug' || deps.logger.level === 'trace') {
    deps.logger.debug(
      {
        requestId,
        policy: policy.name,
        backend: backend.id,
        reason: decision.reason,
        attempt,
        conflicts: conflicts.length,
        scores: decision.scores,
      },
      'routing decision',
    );
  }
  return { backend, decision, policyName: policy.name, lease, ...learnFiguresOf(request, chosen, input.context.nowMs) };
}

/**
 * The backends a try may use (eligible-backends.ts), narrowed to `owner` while it is eligible; `pinned`:
 * the owner, when it is. A fail-open (the poller reports every available backend unhealthy) is counted
 * and logged here.
 */
function tryEligibility(
  deps: RouteDeps,
  pool: string,
  backends: readonly Backend[],
  tried: ReadonlySet<BackendId>,
  owner: BackendId | null,
  requestId: string,
): { readonly eligibility: Eligibility; readonly pinned: Backend | undefined } {
  const open = eligibleBackends(backends, tried, deps.engineStates);
  const pinned = owner === null ? undefined : open.eligible.find((backend) => backend.id === owner);
  const eligibility = pinned === undefined ? open : { ...open, eligible: [pinned] };
  if (eligibility.eligible.length > 0 && eligibility.failedOpen) {
    deps.metrics.recordFailOpen(pool);
    deps.logger.warn(
      { requestId, pool },
      'the health poller reports every available backend unhealthy: routing on the circuit breakers alone',
    );
  }
  return { eligibility, pinned };
}

/**
 * When the chosen backend should have finished this request's prefill, ms after the decision, by the
 * decision's own cost terms (cacheaware's parts): the prefill queued ahead of it (the larger of the router's
 * backlog and the engine's waiting queue, as the rule weighs them) plus its own. Null for a policy without them.
 */
function estimatedPrefillEndMs(decision: RoutedDecision, backendId: BackendId): number | null {
  const parts = decision.scores.find((score) => score.backendId === backendId)?.parts;
  const prefillMs = parts?.['prefillMs'];
  if (parts === undefined || prefillMs === undefined) return null;
  return Math.max(parts['backlogMs'] ?? 0, parts['waitingMs'] ?? 0) + prefillMs;
}

/** The try's lease on its backend, held (HeldLeases) and renewed until released. */
function heldLease(
  deps: RouteDeps,
  pool: string,
  backendId: BackendId,
  leaseId: string,
  blocksAtFirstOutput: readonly BlockHash[],
): Lease {
  const lease = new Lease({
    state: deps.state,
    pool,
    backendId,
    leaseId,
    onError: (error) => deps.logger.warn({ err: error, backend: backendId }, 'lease call failed'),
    book: deps.heldLeases,
    blocksAtFirstOutput,
    prefillDoneDelayMs: deps.prefillDoneDelayMs,
  });
  lease.startRenewing(deps.leaseRenewIntervalMs);
  return lease;
}

/** A candidate as the decision returned it (match depth, load). */
type DecidedCandidate = Awaited<ReturnType<typeof decide>>['candidates'][number];

/** What learn compares the response with (Ticket): the prefix the decision believed `chosen` holds, and its figures then. */
function learnFiguresOf(
  request: ParsedRequest,
  chosen: DecidedCandidate | undefined,
  atMs: number,
): Pick<Ticket, 'prediction' | 'routed'> {
  const { routingRequest } = request;
  return {
    prediction: {
      matchBlocks: chosen?.matchBlocks ?? 0,
      blockSizeBytes: routingRequest.blockSizeBytes,
      textBytes: routingRequest.textBytes,
      unit: routingRequest.unit,
    },
    routed: {
      pool: request.model,
      atMs,
      blockHashes: routingRequest.blockHashes,
      matchRecordedAtMs: chosen?.matchRecordedAtMs ?? null,
      inflightAhead: chosen?.inflight ?? 0,
      pendingAheadTokens: chosen?.pendingPrefillTokens ?? 0,
    },
  };
}

/**
 * What the policy would choose for `request` on the same figures a first try reads (state snapshot,
 * the engines' load), without taking a lease or recording anything: the dry run of `/debug/route`.
 * Over the backends the store would decide over (`decisionScope`: a pool split into cells, the
 * request's cell, named in `cell`).
 */
export async function explainRoute(
  deps: RouteDeps,
  request: ParsedRequest,
  pool: readonly Backend[],
): Promise<{ policy: RoutingPolicy; decision: RoutingDecision; cell: number | null }> {
  const policy = deps.policyFor(request.model, request.kind);
  const eligibility = eligibleBackends(pool, new Set(), deps.engineStates);
  if (eligibility.eligible.length === 0)
    return { policy, decision: { kind: 'rejected', reason: 'no-eligible-backend' }, cell: null };
  const input = decideInput(deps, request, eligibility, policy, '');
  const scope = deps.state.decisionScope?.(request.model, request.routingRequest, input.backends) ?? {
    backends: input.backends,
    cell: null,
  };
  return {
    policy,
    decision: await explainDecision(deps.state, { ...input, backends: scope.backends }),
    cell: scope.cell,
  };
}

function decideInput(
  deps: RouteDeps,
  request: ParsedRequest,
  eligibility: Eligibility,
  policy: RoutingPolicy,
  leaseId: string,
): DecideInput {
  return {
    pool: request.model,
    request: request.routingRequest,
    backends: eligibility.eligible.map((backend) => backend.info),
    policy,
    context: { nowMs: deps.nowMs(), random: deps.random },
    leaseId,
    engine: eligibility.engine,
  };
}
