import type { FlowCapacity, FlowEntry, FlowQueueStore, FlowReply } from '@kvroute/redis-store';

/**
 * flow-queue.lua's twin in this process: the same admission, order and deadlines over one replica's
 * requests only. Flow control runs on it when the router has no Redis, and while Redis is away
 * (failover-flow-queue.ts): fairness then holds per replica, not across them.
 */
const CLASS_SPAN = 2 ** 48;

interface Waiting {
  readonly score: number;
  readonly deadlineMs: number;
}

interface Owner {
  readonly flow: string;
  readonly weight: number;
}

interface PoolQueue {
  /** Admitted request id → lease deadline ms. */
  readonly inflight: Map<string, number>;
  readonly waiting: Map<string, Waiting>;
  virtualTime: number;
  readonly finishes: Map<string, number>;
  /** Who sent each queued or admitted request. */
  readonly owners: Map<string, Owner>;
  /** Flows with a request admitted: how many, and their weight. */
  readonly admitted: Map<string, { count: number; weight: number }>;
}

export class LocalFlowQueue implements FlowQueueStore {
  readonly #pools = new Map<string, PoolQueue>();
  readonly #nowMs: () => number;

  /** `nowMs`: a monotonic clock, ms. */
  constructor(nowMs: () => number) {
    this.#nowMs = nowMs;
  }

  #pool(pool: string): PoolQueue {
    let queue = this.#pools.get(pool);
    if (queue === undefined) {
      queue = {
        inflight: new Map(),
        waiting: new Map(),
        virtualTime: 0,
        finishes: new Map(),
        owners: new Map(),
        admitted: new Map(),
      };
      this.#pools.set(pool, queue);
    }
    return queue;
  }

  #purge(queue: PoolQueue, now: number): void {
    for (const [id, deadline] of queue.inflight) if (deadline <= now) this.#forget(queue, id);
    for (const [id, waiting] of queue.waiting) if (waiting.deadlineMs <= now) this.#forget(queue, id);
    if (queue.waiting.size === 0) this.#forgetTags(queue);
  }

  /** Takes `id` out of the pool, admitted or queued; an admitted one no longer counts for its flow. */
  #forget(queue: PoolQueue, id: string): void {
    const owner = queue.owners.get(id);
    queue.owners.delete(id);
    queue.waiting.delete(id);
    if (!queue.inflight.delete(id) || owner === undefined) return;
    const flow = queue.admitted.get(owner.flow);
    if (flow !== undefined && --flow.count <= 0) queue.admitted.delete(owner.flow);
  }

  #admit(queue: PoolQueue, id: string, owner: Owner, untilMs: number): void {
    queue.inflight.set(id, untilMs);
    queue.owners.set(id, owner);
    const flow = queue.admitted.get(owner.flow);
    if (flow === undefined) queue.admitted.set(owner.flow, { count: 1, weight: owner.weight });
    else flow.count++;
  }

  /** flow-queue.lua's express slots: the owner's flow runs below its fair share and the pool below capacity + express. */
  #express(queue: PoolQueue, owner: Owner, capacity: FlowCapacity): boolean {
    const running = queue.inflight.size;
    if (capacity.enginesSaturated || capacity.expressSlots <= 0) return false;
    if (running >= capacity.capacity + capacity.expressSlots) return false;
    let total = owner.weight;
    for (const [flow, { weight }] of queue.admitted) if (flow !== owner.flow) total += weight;
    // Alone in the pool, a flow has nobody to be protected from: the capacity is its limit.
    if (total === owner.weight) return false;
    const slots = capacity.capacity + capacity.expressSlots;
    return (queue.admitted.get(owner.flow)?.count ?? 0) < (slots * owner.weight) / total;
  }

  #forgetTags(queue: PoolQueue): void {
    queue.virtualTime = 0;
    queue.finishes.clear();
  }

  /** Requests ahead of `id` in dispatch order: score, then id, as Redis's sorted set (and FlowControl) order them. */
  #rank(queue: PoolQueue, id: string): number {
    const mine = queue.waiting.get(id) as Waiting;
    let rank = 0;
    for (const [otherId, other] of queue.waiting) {
      if (other.score < mine.score || (other.score === mine.score && otherId < id)) rank++;
    }
    return rank;
  }

  async enter(pool: string, entry: FlowEntry, capacity: FlowCapacity, queueDeadlineMs: number): Promise<FlowReply> {
    const queue = this.#pool(pool);
    const now = this.#nowMs();
    this.#purge(queue, now);
    const running = queue.inflight.size;
    const owner: Owner = { flow: entry.flow, weight: entry.weight > 0 ? entry.weight : 1 };
    if ((queue.waiting.size === 0 && freeSlots(capacity, running) > 0) || this.#express(queue, owner, capacity)) {
      this.#admit(queue, entry.id, owner, now + capacity.leaseTtlMs);
      return { kind: 'admitted', inflight: running + 1 };
    }
    queue.owners.set(entry.id, owner);
    const start = Math.max(queue.virtualTime, queue.finishes.get(entry.flow) ?? 0);
    queue.finishes.set(entry.flow, start + Math.max(1, entry.costTokens) / owner.weight);
    queue.waiting.set(entry.id, {
      score: entry.priorityClass * CLASS_SPAN + start,
      deadlineMs: now + queueDeadlineMs,
    });
    const score = entry.priorityClass * CLASS_SPAN + start;
    const ahead = this.#rank(queue, entry.id) - Math.max(0, freeSlots(capacity, running));
    return { kind: 'queued', position: Math.max(0, ahead) + 1, inflight: running, order: score };
  }

  async poll(pool: string, id: string, capacity: FlowCapacity): Promise<FlowReply> {
    const queue = this.#pool(pool);
    const now = this.#nowMs();
    this.#purge(queue, now);
    const running = queue.inflight.size;
    const waiting = queue.waiting.get(id);
    if (waiting === undefined) return { kind: 'gone' };
    const free = freeSlots(capacity, running);
    const rank = this.#rank(queue, id);
    // Set by enter before the request joined `waiting`, and removed only with it.
    const owner = queue.owners.get(id) as Owner;
    if (rank >= free && !this.#express(queue, owner, capacity)) {
      const position = rank - Math.max(0, free) + 1;
      return { kind: 'queued', position, inflight: running, order: waiting.score };
    }
    queue.waiting.delete(id);
    this.#admit(queue, id, owner, now + capacity.leaseTtlMs);
    if (queue.waiting.size === 0) this.#forgetTags(queue);
    else queue.virtualTime = Math.max(queue.virtualTime, waiting.score % CLASS_SPAN);
    return { kind: 'admitted', inflight: running + 1 };
  }

  async renew(pool: string, id: string, leaseTtlMs: number): Promise<boolean> {
    const queue = this.#pool(pool);
    if (!queue.inflight.has(id)) return false;
    queue.inflight.set(id, this.#nowMs() + leaseTtlMs);
    return true;
  }

  async inspect(pool: string): Promise<{ readonly inflight: number; readonly queued: number }> {
    const queue = this.#pools.get(pool);
    return { inflight: queue?.inflight.size ?? 0, queued: queue?.waiting.size ?? 0 };
  }

  async leave(pool: string, id: string): Promise<void> {
    const queue = this.#pools.get(pool);
    if (queue === undefined) return;
    const wasWaiting = queue.waiting.has(id);
    this.#forget(queue, id);
    if (wasWaiting && queue.waiting.size === 0) this.#forgetTags(queue);
    if (queue.inflight.size === 0 && queue.waiting.size === 0) this.#pools.delete(pool);
  }
}

/** Slots free for a queued request; with saturated engines none while anything runs (one when nothing does). */
function freeSlots(capacity: FlowCapacity, running: number): number {
  if (capacity.enginesSaturated) return running === 0 ? 1 : 0;
  return capacity.capacity - running;
}
