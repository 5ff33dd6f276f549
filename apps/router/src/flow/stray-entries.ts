import type { FlowQueueStore } from '@kvroute/redis-store';

/** Most stray entries remembered; past it the oldest are dropped (their queue deadline or lease ends them anyway). */
const STRAY_LIMIT = 10_000;

/**
 * Shared-queue entries that a failed call may have left behind. A shared `enter` or `poll` that times out may
 * have run in Redis all the same: its request then holds a place (until its queue deadline) or a slot (until
 * its lease, 15 s by default) in the fleet's queue while it waits in this replica's own. Each is left at
 * once; one whose leave fails too (Redis away) is remembered and left when the shared queue answers again.
 */
export class StrayEntries {
  /** Request id → pool, oldest first. */
  readonly #waiting = new Map<string, string>();

  /** Leaves `id`'s entry in `store`, now or once the shared queue is back (`flush`). */
  leave(store: FlowQueueStore, pool: string, id: string): void {
    store.leave(pool, id).catch(() => this.#remember(pool, id));
  }

  /** Leaves every remembered entry (the shared queue answers again). */
  flush(store: FlowQueueStore): void {
    const waiting = [...this.#waiting];
    this.#waiting.clear();
    for (const [id, pool] of waiting) this.leave(store, pool, id);
  }

  get size(): number {
    return this.#waiting.size;
  }

  #remember(pool: string, id: string): void {
    if (this.#waiting.size >= STRAY_LIMIT) {
      const oldest = this.#waiting.keys().next().value;
      if (oldest !== undefined) this.#waiting.delete(oldest);
    }
    this.#waiting.set(id, pool);
  }
}
