import type { BackendId, BlockHash } from '@kvroute/routing';
import { blockHashArg, DEFAULT_KEY_NAMESPACE, kvEventsKeys, packBlockHashes, type KvEventsKeys } from './keys';
import { PoolLayout } from './pool-cells';
import { RedisStoreError } from './redis-store-error';
import { integerArrayReply, runScript, SCRIPTS, type RedisClient } from './scripts';

/**
 * What an engine's KV events did to one backend rank's cache, in router block names (53-bit hashes
 * computed from the blocks' token ids as the router computes them), in event order.
 * - `stored`: a BlockStored event's blocks, shallowest first, after the block `anchor` (their parent;
 *   null = they start a chain);
 * - `removed`: a BlockRemoved event's blocks (those the indexer could name).
 */
export type KvEventOp =
  | { readonly kind: 'stored'; readonly anchor: BlockHash | null; readonly blocks: readonly BlockHash[] }
  | { readonly kind: 'removed'; readonly blocks: readonly BlockHash[] };

/** One batch for one rank: `clear` = forget the rank's entries first (AllBlocksCleared, or a resync). */
export interface KvEventsBatch {
  readonly clear: boolean;
  readonly ops: readonly KvEventOp[];
}

export interface AppliedKvEvents {
  /** Owner entries of the rank deleted by the batch's removals (both generations). */
  readonly removedEntries: number;
  /**
   * Per `stored` op, in order: blocks of it the rank holds afterwards, or -1 when the rank did not
   * hold the op's anchor in the current generation (a turn or a forget came in between): nothing was
   * written, and the caller sends the whole chain from its first block (anchor null) to record it.
   */
  readonly stored: readonly number[];
}

export interface KvEventsIndexOptions {
  /** A worker connection (`createRedis(url, 'worker')`): nobody waits on the indexer. */
  readonly redis: RedisClient;
  /** Wall-clock ms: entries are stamped with it (the routers' clocks read them). */
  readonly nowMs: () => number;
  /** The routers' `blockIdleTtlMs` and `maxBlocksPerPool`: generations turn by the same rules whoever records. */
  readonly blockIdleTtlMs: number;
  readonly maxBlocksPerPool: number;
  /** The routers' `poolCells`: a rank's ownership lives in its cell (backendCell of its rank id). */
  readonly poolCells?: number;
  readonly keyNamespace?: string;
}

/**
 * The KV-event indexer's writer: one apply-kv-events.lua call per batch, per backend rank, into the
 * pool's shared owner index (src/lua/lib/owner-index.lua), so every router replica routes on what the
 * engines report without a socket to any engine. Rank ids are backend ids (`<id>@<rank>` for a rank
 * of a data-parallel backend): the same strings the routers look ownership up by.
 */
export class KvEventsIndex {
  private readonly layout: PoolLayout;

  constructor(private readonly options: KvEventsIndexOptions) {
    this.layout = new PoolLayout(options.poolCells ?? 1, options.keyNamespace ?? DEFAULT_KEY_NAMESPACE);
  }

  async apply(pool: string, rankId: BackendId, batch: KvEventsBatch): Promise<AppliedKvEvents> {
    if (/[\u0000-\u001f\u007f]/.test(rankId))
      throw new RangeError(`rank id must not contain control characters: ${JSON.stringify(rankId)}`);
    const keys = this.layout.keys(pool, this.layout.cellOf(rankId));
    const ops: string[] = [];
    let storedOps = 0;
    for (const op of batch.ops) {
      if (op.kind === 'stored') {
        storedOps += 1;
        const anchor = op.anchor === null ? '' : blockHashArg(op.anchor);
        ops.push(`S${anchor}:${packBlockHashes(op.blocks)}`);
      } else if (op.blocks.length > 0) {
        ops.push(`R${packBlockHashes(op.blocks)}`);
      }
    }
    if (ops.length === 0 && !batch.clear) return { removedEntries: 0, stored: [] };
    const { options } = this;
    const reply = await runScript(
      options.redis,
      SCRIPTS.applyKvEvents,
      [keys.forgotten, keys.ownersNew, keys.ownersOld, keys.generation],
      // ops: one argument per event, bounded by the caller's cap on a batch's events.
      (
        [rankId, options.nowMs(), options.blockIdleTtlMs, options.maxBlocksPerPool, batch.clear ? '1' : '0'] as (
          | string
          | number
        )[]
      ).concat(ops),
    );
    const values = integerArrayReply(SCRIPTS.applyKvEvents, reply, 1 + storedOps);
    return { removedEntries: values[0] as number, stored: values.slice(1) };
  }
}

export interface KvEventsLeasesOptions {
  readonly redis: RedisClient;
  /** This poller replica's id (unique per process: host, pid and a random part). */
  readonly replicaId: string;
  /** A lease not renewed for this long is free for another replica (ms). */
  readonly leaseTtlMs: number;
  /** A cursor not advanced for this long is forgotten (a departed backend's), ms (default a day). */
  readonly cursorTtlMs?: number;
  readonly keyNamespace?: string;
}

/** A lease call's answer: whether this replica holds the subscription, and its cursor (null = none stored). */
export interface KvEventsLeaseState {
  readonly held: boolean;
  readonly cursor: bigint | null;
}

const DEFAULT_CURSOR_TTL_MS = 86_400_000;

/**
 * Which poller replica reads each backend rank's event stream (kv-events-lease.lua): a lease per
 * subscription, renewed by its holder, and the stream's cursor (the last applied sequence number),
 * from which the next holder replays. And the replicas' heartbeats, over which the subscriptions are
 * shared (the caller picks its share by rendezvous over `liveReplicas`).
 */
export class KvEventsLeases {
  private readonly keys: KvEventsKeys;

  constructor(private readonly options: KvEventsLeasesOptions) {
    this.keys = kvEventsKeys(options.keyNamespace ?? DEFAULT_KEY_NAMESPACE);
  }

  acquire(subscription: string): Promise<KvEventsLeaseState> {
    return this.call('acquire', subscription, null);
  }

  renew(subscription: string): Promise<KvEventsLeaseState> {
    return this.call('renew', subscription, null);
  }

  /** Stores `appliedSeq` as the cursor if this replica still holds the lease (and renews it). */
  advance(subscription: string, appliedSeq: bigint | null): Promise<KvEventsLeaseState> {
    return this.call('advance', subscription, appliedSeq);
  }

  /** Stores the cursor and lets the subscription go (a graceful stop, or a handover to its rendezvous owner). */
  release(subscription: string, appliedSeq: bigint | null): Promise<KvEventsLeaseState> {
    return this.call('release', subscription, appliedSeq);
  }

  /** The stored cursor, whoever holds the lease (tests, diagnostics). */
  async cursor(subscription: string): Promise<bigint | null> {
    const value = await this.options.redis.get(this.keys.cursor(subscription));
    return value === null ? null : BigInt(value);
  }

  /**
   * Says this replica is alive at `nowMs` and returns the replicas alive within `liveForMs` (sorted,
   * this one included). Those older are trimmed: a dead replica's share moves once its leases expire.
   */
  async liveReplicas(nowMs: number, liveForMs: number): Promise<string[]> {
    const { redis, replicaId } = this.options;
    const key = this.keys.replicas;
    await redis.zadd(key, nowMs, replicaId);
    await redis.zremrangebyscore(key, '-inf', `(${nowMs - liveForMs}`);
    await redis.pexpire(key, Math.max(liveForMs * 10, 60_000));
    return (await redis.zrange(key, 0, -1)).sort();
  }

  /** Leaves the replica set at once (graceful stop): the others take its share without waiting for it to age out. */
  async leave(): Promise<void> {
    await this.options.redis.zrem(this.keys.replicas, this.options.replicaId);
  }

  private async call(
    op: 'acquire' | 'renew' | 'advance' | 'release',
    subscription: string,
    appliedSeq: bigint | null,
  ): Promise<KvEventsLeaseState> {
    const { options } = this;
    const reply = await runScript(
      options.redis,
      SCRIPTS.kvEventsLease,
      [this.keys.lease(subscription), this.keys.cursor(subscription)],
      [
        op,
        options.replicaId,
        options.leaseTtlMs,
        appliedSeq === null ? '' : appliedSeq.toString(),
        options.cursorTtlMs ?? DEFAULT_CURSOR_TTL_MS,
      ],
    );
    if (!Array.isArray(reply) || reply.length !== 2 || typeof reply[1] !== 'string' || !/^\d*$/.test(reply[1])) {
      throw new RedisStoreError(
        'REDIS_STORE_ERR_BAD_REPLY',
        SCRIPTS.kvEventsLease.name,
        `kv-events-lease.lua returned ${JSON.stringify(reply)}`,
      );
    }
    return { held: reply[0] === 1, cursor: reply[1] === '' ? null : BigInt(reply[1]) };
  }
}

/**
 * The backend ranks (of `rankIds`) whose KV-event streams the indexer follows now: a poller replica
 * holds the stream's lease and has applied at least one batch from it (its cursor, kept a while after
 * its last write). What a router shows as the backend's cache view `events` (one MGET: the keys share
 * the `{kv-events}` slot).
 */
export async function readFollowedKvEventStreams(
  redis: RedisClient,
  rankIds: readonly string[],
  keyNamespace: string = DEFAULT_KEY_NAMESPACE,
): Promise<Set<string>> {
  const followed = new Set<string>();
  if (rankIds.length === 0) return followed;
  const keys = kvEventsKeys(keyNamespace);
  const values = await redis.mget(rankIds.flatMap((id) => [keys.lease(id), keys.cursor(id)]));
  rankIds.forEach((id, k) => {
    if (values[2 * k] !== null && values[2 * k + 1] !== null) followed.add(id);
  });
  return followed;
}
