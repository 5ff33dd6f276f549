/**
 * A pool's flow-control queue in Redis (flow-queue.lua; issue 30): admission while the pool has
 * capacity, else a place in one queue shared by every router replica, ordered by priority class and
 * then by start-time fair queuing over tokens, so a tenant's share holds across replicas. The router
 * keeps each queued request in memory and polls for its turn (apps/router/src/flow/).
 */
import { flowKeys } from './keys';
import { RedisStoreError } from './redis-store-error';
import { integerArrayReply, runScript, SCRIPTS, type RedisClient } from './scripts';

/** What a queued or admitted request is, for the queue's order. */
export interface FlowEntry {
  /** Unique per request. */
  readonly id: string;
  /** Who it counts against: a tenant, or a client address in open mode. */
  readonly flow: string;
  /** Its cost in tokens (prompt estimate + the generation reserved), > 0. */
  readonly costTokens: number;
  /** The flow's weight (> 0): a flow of weight 2 gets twice the tokens of one of weight 1. */
  readonly weight: number;
  /** 0 (served first), 1 or 2. */
  readonly priorityClass: 0 | 1 | 2;
}

/** The pool's state a decision reads besides the queue. */
export interface FlowCapacity {
  /** Requests the pool may have in flight (≥ 1). */
  readonly capacity: number;
  /** The engines say they are saturated: nothing more goes while anything is in flight. */
  readonly enginesSaturated: boolean;
  /** How long an admitted request's slot lives without renew, ms. */
  readonly leaseTtlMs: number;
  /**
   * Slots beyond `capacity` that a flow below its fair share of capacity + these (by weight, among the
   * flows with a request admitted) takes at once, queue or not, while the engines are not saturated (≥ 0).
   */
  readonly expressSlots: number;
}

export type FlowReply =
  | { readonly kind: 'admitted'; readonly inflight: number }
  /**
   * `position`: requests that go before it once slots free up (1 = next). `order`: its place in the shared
   * queue's order (lower goes first; the score, class × 2^48 + start tag, exact; ties go to the lower id, as the
   * sorted set orders them).
   */
  | { readonly kind: 'queued'; readonly position: number; readonly inflight: number; readonly order: number }
  /** Not in the queue: its queue deadline passed, or it left. */
  | { readonly kind: 'gone' };

export interface FlowQueueStore {
  enter(pool: string, entry: FlowEntry, capacity: FlowCapacity, queueDeadlineMs: number): Promise<FlowReply>;
  poll(pool: string, id: string, capacity: FlowCapacity): Promise<FlowReply>;
  renew(pool: string, id: string, leaseTtlMs: number): Promise<boolean>;
  leave(pool: string, id: string): Promise<void>;
  /** The pool's admitted and waiting requests, fleet-wide (for /debug/flow; expired ones may still count). */
  inspect(pool: string): Promise<{ readonly inflight: number; readonly queued: number }>;
}

export class RedisFlowQueue implements FlowQueueStore {
  readonly #redis: RedisClient;
  readonly #namespace: string | undefined;

  constructor(options: { readonly redis: RedisClient; readonly keyNamespace?: string }) {
    this.#redis = options.redis;
    this.#namespace = options.keyNamespace;
  }

  #keys(pool: string): string[] {
    const keys = flowKeys(pool, this.#namespace);
    return [keys.inflight, keys.queue, keys.queueDeadlines, keys.state, keys.flows, keys.owners];
  }

  async enter(pool: string, entry: FlowEntry, capacity: FlowCapacity, queueDeadlineMs: number): Promise<FlowReply> {
    const reply = await runScript(this.#redis, SCRIPTS.flowQueue, this.#keys(pool), [
      'enter',
      entry.id,
      Math.max(1, Math.floor(capacity.capacity)),
      capacity.leaseTtlMs,
      Math.max(1, Math.ceil(queueDeadlineMs)),
      entry.flow,
      Math.max(1, Math.ceil(entry.costTokens)),
      entry.weight > 0 ? entry.weight : 1,
      entry.priorityClass,
      capacity.enginesSaturated ? 1 : 0,
      Math.max(0, Math.floor(capacity.expressSlots)),
    ]);
    return flowReplyOf(reply);
  }

  async poll(pool: string, id: string, capacity: FlowCapacity): Promise<FlowReply> {
    const reply = await runScript(this.#redis, SCRIPTS.flowQueue, this.#keys(pool), [
      'poll',
      id,
      Math.max(1, Math.floor(capacity.capacity)),
      capacity.leaseTtlMs,
      capacity.enginesSaturated ? 1 : 0,
      Math.max(0, Math.floor(capacity.expressSlots)),
    ]);
    return flowReplyOf(reply);
  }

  async renew(pool: string, id: string, leaseTtlMs: number): Promise<boolean> {
    const reply = await runScript(this.#redis, SCRIPTS.flowQueue, this.#keys(pool), ['renew', id, leaseTtlMs]);
    return integerArrayReply(SCRIPTS.flowQueue, reply, 1)[0] === 1;
  }

  async leave(pool: string, id: string): Promise<void> {
    const reply = await runScript(this.#redis, SCRIPTS.flowQueue, this.#keys(pool), ['leave', id]);
    integerArrayReply(SCRIPTS.flowQueue, reply, 2);
  }

  async inspect(pool: string): Promise<{ readonly inflight: number; readonly queued: number }> {
    const keys = flowKeys(pool, this.#namespace);
    // Two reads of one slot; no script needed for figures that are only shown.
    const [inflight, queued] = await Promise.all([this.#redis.zcard(keys.inflight), this.#redis.zcard(keys.queue)]);
    return { inflight, queued };
  }
}

/**
 * flow-queue.lua's enter and poll reply: outcome, position and in-flight as integers, then, queued, the request's
 * score as the decimal string of the double Redis sorts by (an integer reply would truncate it); else 0.
 */
function flowReplyOf(reply: unknown): FlowReply {
  const [outcome, position, inflight, score] = Array.isArray(reply) ? reply : [];
  const order = Buffer.isBuffer(score) || typeof score === 'string' ? Number(String(score)) : Number.NaN;
  const integers = [outcome, position, inflight].every(Number.isInteger);
  if (!Array.isArray(reply) || reply.length !== 4 || !integers || (outcome === 0 && !Number.isFinite(order))) {
    throw new RedisStoreError(
      'REDIS_STORE_ERR_BAD_REPLY',
      SCRIPTS.flowQueue.name,
      `flow-queue.lua returned ${JSON.stringify(reply)?.slice(0, 200)}, expected 3 integers and a score`,
    );
  }
  if (outcome === 1) return { kind: 'admitted', inflight };
  if (outcome !== 0) return { kind: 'gone' };
  return { kind: 'queued', position, inflight, order };
}
