import { settlesWithin } from '@kvroute/platform';

/** What the book needs of a lease: releasing it (idempotent). */
export interface ReleasableLease {
  release(): void;
}

/**
 * Every lease this replica holds, and the release calls still on their way to the routing state. A
 * lease is released by the request that took it, on whichever path ends it; at shutdown the book
 * releases whatever is left (requests aborted at the grace deadline) and is awaited before the Redis
 * connection closes, so no release is dropped by the disconnect and no in-flight count is left to
 * expire by its TTL.
 */
export class HeldLeases {
  private readonly held = new Set<ReleasableLease>();
  private readonly releasing = new Set<Promise<unknown>>();

  /** Leases held now. */
  get size(): number {
    return this.held.size;
  }

  add(lease: ReleasableLease): void {
    this.held.add(lease);
  }

  /** The lease was released; `call` is its release on the state store, awaited by `settled`. */
  released(lease: ReleasableLease, call: Promise<unknown>): void {
    this.held.delete(lease);
    this.releasing.add(call);
    const forget = (): void => {
      this.releasing.delete(call);
    };
    call.then(forget, forget);
  }

  /** Releases every lease still held; returns how many there were. */
  releaseAll(): number {
    const left = [...this.held];
    for (const lease of left) lease.release();
    return left.length;
  }

  /** Waits for the release calls under way, at most `timeoutMs`; true if all ended. */
  settled(timeoutMs: number): Promise<boolean> {
    if (this.releasing.size === 0) return Promise.resolve(true);
    return settlesWithin(Promise.allSettled([...this.releasing]), timeoutMs);
  }
}
