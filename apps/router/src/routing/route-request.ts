import { candidatesOf, type BackendId, type BlockHash, type Candidate, type DecideInput, type RoutingDecision, type RoutingPolicy, type RoutingRequest, type RoutingStateStore } from '@kvroute/routing';
import type { Backend } from '../backends/backend-registry';
import type { Eligibility } from '../backends/eligible-backends';
import type { EngineStateView } from '../backends/engine-state-view';
import type { AskTrueMatches } from '../proxy/true-match';
import type { HeldLeases } from './held-leases';

/** What deciding needs: the shared state, and the clock and randomness the policy may use. */
export interface RouteContext {
  readonly state: RoutingStateStore;
  readonly nowMs: () => number;
  readonly random: () => number;
  /** How often a lease held by a running request is renewed (shared state expires unrenewed leases). */
  readonly leaseRenewIntervalMs: number;
  /** The health poller's view of the backends (health, engine load); null without a poller's Redis. */
  readonly engineStates?: EngineStateView | null;
  /** Asks the backends what they would serve from cache (vllm-sim's /sim/match), for policies with `needsTrueMatch`; absent = nobody answers. */
  readonly askTrueMatches?: AskTrueMatches;
  /** Every lease this replica holds (shutdown releases what is left); absent = not listed. */
  readonly heldLeases?: HeldLeases;
}

export interface RouteChoice {
  readonly decision: RoutingDecision;
  readonly candidates: readonly Candidate[];
}

/**
 * The backends' own word on what they would serve from cache for `body`, when `policy` reads it
 * (`needsTrueMatch`); undefined otherwise, synchronously, so other policies cost no call and no await on
 * the request path. Without an asker every backend is unanswered (null).
 */
export function trueMatchesFor(context: RouteContext, policy: RoutingPolicy, backends: readonly Backend[], body: Buffer): Promise<ReadonlyMap<BackendId, number | null>> | undefined {
  if (policy.needsTrueMatch !== true) return undefined;
  return context.askTrueMatches ? context.askTrueMatches(backends, body) : Promise.resolve(new Map());
}

/**
 * What the policy would choose for `request` (raw body `body`) among `eligible`, on the same figures a
 * real decision reads (state snapshot, the engines' load, the backends' true matches for the oracle),
 * without taking a lease or recording anything: the dry run of `/debug/route`. Real requests go through
 * `RoutingStateStore.decide`.
 */
export async function dryRunDecision(
  context: RouteContext,
  pool: string,
  request: RoutingRequest,
  body: Buffer,
  eligibility: Eligibility,
  policy: RoutingPolicy,
): Promise<RouteChoice> {
  const trueMatchTokens = await trueMatchesFor(context, policy, eligibility.eligible, body);
  const input: DecideInput = {
    pool,
    request,
    backends: eligibility.eligible.map((backend) => backend.info),
    policy,
    context: { nowMs: context.nowMs(), random: context.random },
    leaseId: '',
    engine: eligibility.engine,
    ...(trueMatchTokens === undefined ? {} : { trueMatchTokens }),
  };
  const snapshot = await context.state.snapshot(
    pool,
    input.backends.map((backend) => backend.id),
    policy.usesPrefixMatch ? request.blockHashes : [],
  );
  const candidates = candidatesOf(input, snapshot);
  return { decision: policy.choose(request, candidates, input.context), candidates };
}

export interface LeaseOptions {
  readonly state: RoutingStateStore;
  readonly pool: string;
  readonly backendId: string;
  readonly leaseId: string;
  /** Told about a renewal, prefill-done or release call that failed. */
  readonly onError: (error: unknown) => void;
  /** Where the lease is listed while held, so that shutdown can release what is left and wait for the releases. */
  readonly book?: HeldLeases | undefined;
  /** Blocks the backend is recorded as holding when the first token arrives (policies with `recordsOwnershipAtFirstToken`). */
  readonly heldBlocksAtFirstToken?: readonly BlockHash[] | undefined;
}

/**
 * An in-flight lease on one backend: released exactly once, on whichever path ends the request
 * (response end, upstream error, client abort, timeout, retry elsewhere, shutdown deadline).
 */
export class Lease {
  readonly pool: string;
  readonly backendId: string;
  readonly leaseId: string;
  private released = false;
  private prefillFinished = false;
  private renewTimer: NodeJS.Timeout | null = null;

  constructor(private readonly options: LeaseOptions) {
    this.pool = options.pool;
    this.backendId = options.backendId;
    this.leaseId = options.leaseId;
    options.book?.add(this);
  }

  /** Keeps the lease alive while the request runs (every `intervalMs`, until release). */
  startRenewing(intervalMs: number): void {
    if (this.released || this.renewTimer || intervalMs <= 0) return;
    this.renewTimer = setInterval(() => {
      this.options.state.renew(this.pool, this.backendId, this.leaseId).catch(this.options.onError);
    }, intervalMs);
    this.renewTimer.unref();
  }

  /** The first token arrived: this request's prefill leaves the backend's backlog, and its prefix is the backend's (once). */
  markPrefillDone(): void {
    if (this.prefillFinished || this.released) return;
    this.prefillFinished = true;
    this.options.state.prefillDone(this.pool, this.backendId, this.leaseId, this.options.heldBlocksAtFirstToken ?? []).catch(this.options.onError);
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    if (this.renewTimer) clearInterval(this.renewTimer);
    const call = this.options.state.release(this.pool, this.backendId, this.leaseId).catch(this.options.onError);
    this.options.book?.released(this, call);
  }
}
