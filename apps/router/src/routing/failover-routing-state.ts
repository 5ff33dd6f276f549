import type {
  AtomicOutcomeBase,
  AtomicRouteInput,
  BackendId,
  BackendInfo,
  BlockHash,
  DecisionScope,
  LearnInput,
  LearnReply,
  RoutingRequest,
  RoutingSnapshot,
  RoutingStateStore,
} from '@kvroute/routing';
import { withDeadline } from './with-deadline';

export interface FailoverOptions {
  /** A shared-state call slower than this counts as a failure (the request goes on with local state). */
  readonly timeoutMs: number;
  /** After a failure, how long to stay on local state before trying the shared store again (doubles up to maxRetryAfterMs). */
  readonly retryAfterMs: number;
  readonly maxRetryAfterMs: number;
  readonly nowMs: () => number;
  /** Called when the router enters or leaves degraded mode (for the metric and the log line). */
  readonly onDegradedChange: (degraded: boolean, error?: unknown) => void;
}

/**
 * Shared routing state (Redis) with a local fallback, so that a slow or dead Redis never stalls or
 * fails a request. Every shared call has a tight deadline; a failure switches the router to its local
 * in-memory state ("degraded": routing continues on this replica's own view) and the shared store is
 * tried again after a backoff; the first success switches back. A lease is released, renewed or
 * completed in the store that took it; leases left in Redis by a failed call expire by their TTL.
 *
 * `routeAtomically` (one round trip that decides in Redis) is offered while the shared store is
 * healthy; degraded, or when that call fails, it answers null and `decide` falls back to a snapshot,
 * which then reads the local state: the failure has just switched the router to degraded, and the
 * shared store is not tried again before the backoff (retryAfterMs ≥ 1) has passed.
 */
export class FailoverRoutingState implements RoutingStateStore {
  private degradedSinceMs: number | null = null;
  private nextPrimaryTryMs = 0;
  private backoffMs: number;
  private readonly fallbackLeases = new Set<string>();

  constructor(
    private readonly primary: RoutingStateStore,
    private readonly fallback: RoutingStateStore,
    private readonly options: FailoverOptions,
  ) {
    // A backoff of at least 1 ms is what keeps the snapshot after a failed routeAtomically local.
    if (!Number.isInteger(options.retryAfterMs) || options.retryAfterMs < 1)
      throw new RangeError(`retryAfterMs must be an integer >= 1, got ${options.retryAfterMs}`);
    this.backoffMs = options.retryAfterMs;
  }

  get degraded(): boolean {
    return this.degradedSinceMs !== null;
  }

  /** The primary's scope while it is in use; degraded, the local state decides over every backend. */
  decisionScope(pool: string, request: RoutingRequest, backends: readonly BackendInfo[]): DecisionScope {
    if (this.degraded || this.primary.decisionScope === undefined) return { backends, cell: null };
    return this.primary.decisionScope(pool, request, backends);
  }

  async routeAtomically(input: AtomicRouteInput): Promise<AtomicOutcomeBase | null> {
    const primary = this.primary;
    if (primary.routeAtomically === undefined || !this.shouldTryPrimary()) return null;
    try {
      const outcome = await this.withDeadline(primary.routeAtomically(input), (late) => {
        // Redis took the lease after all, but the request went on without it: give it back now, not at its TTL.
        const chosen = late?.candidates[late.chosen];
        if (chosen) this.primary.release(input.pool, chosen.backend.id, input.leaseId).catch(() => undefined);
      });
      this.recovered();
      return outcome;
    } catch (error) {
      this.failed(error);
      return null;
    }
  }

  async snapshot(
    pool: string,
    backends: readonly BackendId[],
    blockHashes: readonly BlockHash[],
  ): Promise<RoutingSnapshot> {
    if (this.shouldTryPrimary()) {
      try {
        const snapshot = await this.withDeadline(this.primary.snapshot(pool, backends, blockHashes));
        this.recovered();
        return snapshot;
      } catch (error) {
        this.failed(error);
      }
    }
    return this.fallback.snapshot(pool, backends, blockHashes);
  }

  async reserve(
    pool: string,
    backendId: BackendId,
    leaseId: string,
    blockHashes: readonly BlockHash[],
    prefillTokens: number,
    maxInflight?: number,
  ): Promise<boolean> {
    if (this.shouldTryPrimary()) {
      try {
        const reserved = await this.withDeadline(
          this.primary.reserve(pool, backendId, leaseId, blockHashes, prefillTokens, maxInflight),
          (late) => {
            if (late) this.primary.release(pool, backendId, leaseId).catch(() => undefined);
          },
        );
        this.recovered();
        // The local state is not kept warm in parallel (that would index every request twice): an
        // outage starts with a cold local index, where cacheaware places prompts by rendezvous hashing
        // of their first block, on which every replica agrees without talking to the others.
        return reserved;
      } catch (error) {
        this.failed(error);
      }
    }
    const reserved = await this.fallback.reserve(pool, backendId, leaseId, blockHashes, prefillTokens, maxInflight);
    if (reserved) this.fallbackLeases.add(leaseId);
    return reserved;
  }

  async renew(pool: string, backendId: BackendId, leaseId: string): Promise<boolean> {
    // A renewal that cannot reach Redis is not an error: the lease then expires there by itself.
    return this.storeOf(leaseId)
      .renew(pool, backendId, leaseId)
      .catch(() => false);
  }

  async prefillDone(
    pool: string,
    backendId: BackendId,
    leaseId: string,
    heldBlocks: readonly BlockHash[] = [],
  ): Promise<void> {
    await this.storeOf(leaseId)
      .prefillDone(pool, backendId, leaseId, heldBlocks)
      .catch(() => undefined);
  }

  async clearBacklog(pool: string, backendId: BackendId, leaseId: string): Promise<void> {
    await this.storeOf(leaseId)
      .clearBacklog(pool, backendId, leaseId)
      .catch(() => undefined);
  }

  async release(
    pool: string,
    backendId: BackendId,
    leaseId: string,
    heldBlocks: readonly BlockHash[] = [],
  ): Promise<void> {
    const store = this.storeOf(leaseId);
    this.fallbackLeases.delete(leaseId);
    await store.release(pool, backendId, leaseId, heldBlocks).catch(() => undefined);
  }

  async forgetBackend(pool: string, backendId: BackendId): Promise<void> {
    await Promise.allSettled([
      this.primary.forgetBackend(pool, backendId),
      this.fallback.forgetBackend(pool, backendId),
    ]);
  }

  /** What responses taught goes where routing reads now: Redis, or the local state while degraded (no deadline: nothing waits on it). */
  async learn(pool: string, input: LearnInput): Promise<LearnReply> {
    if (!this.degraded) {
      try {
        return await this.primary.learn(pool, input);
      } catch {
        // The next decision finds out whether Redis is back; this lesson goes to the local state.
      }
    }
    return this.fallback.learn(pool, input);
  }

  inflightCounts(): ReadonlyMap<BackendId, number> {
    return this.degraded ? this.fallback.inflightCounts() : this.primary.inflightCounts();
  }

  private storeOf(leaseId: string): RoutingStateStore {
    return this.fallbackLeases.has(leaseId) ? this.fallback : this.primary;
  }

  private shouldTryPrimary(): boolean {
    return this.degradedSinceMs === null || this.options.nowMs() >= this.nextPrimaryTryMs;
  }

  private recovered(): void {
    if (this.degradedSinceMs === null) return;
    this.degradedSinceMs = null;
    this.backoffMs = this.options.retryAfterMs;
    this.options.onDegradedChange(false);
  }

  private failed(error: unknown): void {
    const now = this.options.nowMs();
    if (this.degradedSinceMs === null) {
      this.degradedSinceMs = now;
      this.options.onDegradedChange(true, error);
    } else if (now < this.nextPrimaryTryMs) {
      // A call that was already in flight when an earlier one failed (every request of the same try
      // window asks the shared store): the backoff that failure set stands. Doubling once per such
      // call took it from retryAfterMs to its cap within one window under concurrent load.
      return;
    } else {
      this.backoffMs = Math.min(this.backoffMs * 2, this.options.maxRetryAfterMs);
    }
    this.nextPrimaryTryMs = now + this.backoffMs;
  }

  /** `promise` within redisTimeoutMs (routing/with-deadline.ts). */
  private withDeadline<T>(promise: Promise<T>, onLateValue?: (value: T) => void): Promise<T> {
    return withDeadline(promise, this.options.timeoutMs, 'shared routing state', onLateValue);
  }
}
