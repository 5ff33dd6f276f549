import type { Candidate, PolicyContext, RoutingDecision, RoutingPolicy, RoutingRequest, RoutingStateStore } from '@kvroute/routing';
import type { Backend } from '../backends/backend-registry';
import type { EngineStateView } from '../backends/engine-state-view';

/** What deciding needs: the shared state, and the clock and randomness the policy may use. */
export interface RouteContext {
  readonly state: RoutingStateStore;
  readonly nowMs: () => number;
  readonly random: () => number;
  /** How often a lease held by a running request is renewed (shared state expires unrenewed leases). */
  readonly leaseRenewIntervalMs: number;
  /** The health poller's view of the backends (health, engine load); null without a poller's Redis. */
  readonly engineStates?: EngineStateView | null;
}

export interface RouteChoice {
  readonly decision: RoutingDecision;
  readonly candidates: readonly Candidate[];
}

/**
 * Reads the state for the eligible backends of a pool (match depth and in-flight) and lets the policy
 * choose. Deciding only: taking the lease and recording ownership is `reserve`, done by the caller
 * right after, so a dry run (`/debug/route`) changes nothing.
 */
export async function chooseBackend(
  context: RouteContext,
  pool: string,
  request: RoutingRequest,
  eligible: readonly Backend[],
  policy: RoutingPolicy,
): Promise<RouteChoice> {
  const snapshot = await context.state.snapshot(
    pool,
    eligible.map((backend) => backend.id),
    policy.usesPrefixMatch ? request.blockHashes : [],
  );
  const candidates: Candidate[] = eligible.map((backend) => ({
    backend: backend.info,
    inflight: snapshot.inflight.get(backend.id) ?? 0,
    matchBlocks: snapshot.matchBlocks.get(backend.id) ?? 0,
    pendingPrefillTokens: snapshot.pendingPrefillTokens.get(backend.id) ?? 0,
  }));
  const policyContext: PolicyContext = { nowMs: context.nowMs(), random: context.random };
  return { decision: policy.choose(request, candidates, policyContext), candidates };
}

/**
 * An in-flight lease on one backend: released exactly once, on whichever path ends the request
 * (response end, upstream error, client abort, timeout, retry elsewhere).
 */
export class Lease {
  private released = false;
  private prefillFinished = false;
  private renewTimer: NodeJS.Timeout | null = null;

  constructor(
    private readonly state: RoutingStateStore,
    readonly pool: string,
    readonly backendId: string,
    readonly leaseId: string,
    private readonly onReleaseError: (error: unknown) => void,
  ) {}

  /** Keeps the lease alive while the request runs (every `intervalMs`, until release). */
  startRenewing(intervalMs: number): void {
    if (this.released || this.renewTimer || intervalMs <= 0) return;
    this.renewTimer = setInterval(() => {
      this.state.renew(this.pool, this.backendId, this.leaseId).catch(this.onReleaseError);
    }, intervalMs);
    this.renewTimer.unref();
  }

  /** The first token arrived: this request's prefill leaves the backend's backlog (once). */
  markPrefillDone(): void {
    if (this.prefillFinished || this.released) return;
    this.prefillFinished = true;
    this.state.prefillDone(this.pool, this.backendId, this.leaseId).catch(this.onReleaseError);
  }

  release(): void {
    if (this.released) return;
    this.released = true;
    if (this.renewTimer) clearInterval(this.renewTimer);
    this.state.release(this.pool, this.backendId, this.leaseId).catch(this.onReleaseError);
  }
}
