/**
 * How many router replicas are alive, as Redis last saw them: each replica says so every few seconds
 * (one ZSET member per replica, its score the ms of its last word; one key, so one MULTI). The count is
 * what a replica divides a tenant's limits by while Redis is unreachable (docs/adr/0006): each then
 * enforces its share, in memory, and the fleet as a whole stays near the limit.
 */
import { routerReplicasKey } from './keys';
import type { RedisClient } from './scripts';

export interface RouterReplicasOptions {
  readonly redis: RedisClient;
  /** This replica's id (unique per process). */
  readonly replicaId: string;
  /** A replica not heard from for this long is not counted, ms (3 heartbeats is a good choice). */
  readonly staleAfterMs: number;
  readonly keyNamespace?: string;
}

export class RouterReplicas {
  readonly #options: RouterReplicasOptions;
  readonly #key: string;

  constructor(options: RouterReplicasOptions) {
    this.#options = options;
    this.#key = routerReplicasKey(options.keyNamespace);
  }

  /** Says this replica is alive at `nowMs` (wall clock) and answers how many are (this one included). */
  async heartbeat(nowMs: number): Promise<number> {
    const { redis, replicaId, staleAfterMs } = this.#options;
    const replies = await redis
      .multi()
      .zadd(this.#key, nowMs, replicaId)
      .zremrangebyscore(this.#key, '-inf', nowMs - staleAfterMs)
      .zcard(this.#key)
      .pexpire(this.#key, staleAfterMs * 2)
      .exec();
    const count = Number(replies?.[2]?.[1]);
    return Number.isInteger(count) && count >= 1 ? count : 1;
  }

  /** This replica leaves (shutdown): the others stop counting it at once. */
  async leave(): Promise<void> {
    await this.#options.redis.zrem(this.#key, this.#options.replicaId);
  }
}
