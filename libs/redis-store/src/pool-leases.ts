import type { BackendId, BlockHash, RoutingSnapshot } from '@kvroute/routing';
import { blockHashArg, decisionKeys, packBlockHashes } from './keys';
import type { PoolLayout } from './pool-cells';
import { integerArrayReply, integerReply, runScript, SCRIPTS, type RedisClient } from './scripts';
import { RECORD_BLOCKS_PER_CALL } from './store-limits';

/** What the lease and ownership calls share with the rest of the store. */
export interface PoolLeasesOptions {
  readonly redis: RedisClient;
  readonly layout: PoolLayout;
  readonly nowMs: () => number;
  readonly blockIdleTtlMs: number;
  readonly maxBlocksPerPool: number;
  readonly leaseTtlMs: number;
  /** Called with every in-flight count a reply carried (the store's cache for metrics). */
  readonly sawInflight: (pool: string, backendId: BackendId, count: number) => void;
}

/** A snapshot's maps, filled cell by cell. */
type SnapshotMaps = {
  matchBlocks: Map<BackendId, number>;
  matchRecordedAtMs: Map<BackendId, number>;
  inflight: Map<BackendId, number>;
  pendingPrefillTokens: Map<BackendId, number>;
};

/**
 * Leases and ownership outside a decision: the snapshot a policy without an atomic rule decides on,
 * its conditional reservation (reserve.lua), renewal, prefill-done and release (which record the
 * chain the first output proved), forgetting a backend, and the rest of a chain longer than one call
 * records. Each operation is one script on the backend's cell.
 */
export class PoolLeases {
  constructor(private readonly options: PoolLeasesOptions) {}

  /** One snapshot.lua per cell the backends are in (one in a pool that is not split). */
  async snapshot(
    pool: string,
    backends: readonly BackendId[],
    blockHashes: readonly BlockHash[],
  ): Promise<RoutingSnapshot> {
    const snapshot: SnapshotMaps = {
      matchBlocks: new Map(),
      matchRecordedAtMs: new Map(),
      inflight: new Map(),
      pendingPrefillTokens: new Map(),
    };
    if (backends.length === 0) return snapshot;
    const byCell = this.options.layout.splitByCell(backends, (backend) => backend);
    await Promise.all(
      byCell.map((members, cell) =>
        members.length === 0 ? undefined : this.snapshotCell(pool, cell, members, blockHashes, snapshot),
      ),
    );
    return snapshot;
  }

  private async snapshotCell(
    pool: string,
    cell: number,
    backends: readonly BackendId[],
    blockHashes: readonly BlockHash[],
    into: SnapshotMaps,
  ): Promise<void> {
    const keys = this.options.layout.keys(pool, cell);
    const reply = await runScript(
      this.options.redis,
      SCRIPTS.snapshot,
      [keys.forgotten, keys.leaseDeadlines, keys.inflight, keys.pending, keys.ownersNew, keys.ownersOld],
      ([this.options.nowMs(), keys.prefix, packBlockHashes(blockHashes)] as (string | number)[]).concat(backends),
    );
    const values = integerArrayReply(SCRIPTS.snapshot, reply, 4 * backends.length);
    backends.forEach((backend, index) => {
      const count = values[4 * index] as number;
      const depth = values[4 * index + 2] as number;
      const recordedAt = values[4 * index + 3] as number;
      into.inflight.set(backend, count);
      into.pendingPrefillTokens.set(backend, values[4 * index + 1] as number);
      if (depth > 0) into.matchBlocks.set(backend, depth);
      if (depth > 0 && recordedAt >= 0) into.matchRecordedAtMs.set(backend, recordedAt);
      this.options.sawInflight(pool, backend, count);
    });
  }

  /** reserve.lua: the lease on `backendId` unless it has `maxInflight` (0: no cap), and its ownership of `blockHashes`. */
  async reserve(
    pool: string,
    backendId: BackendId,
    leaseId: string,
    blockHashes: readonly BlockHash[],
    prefillTokens: number,
    maxInflight: number,
  ): Promise<boolean> {
    const { options } = this;
    const keys = options.layout.keys(pool, options.layout.cellOf(backendId));
    const reply = await runScript(options.redis, SCRIPTS.reserve, decisionKeys(keys), [
      options.nowMs(),
      keys.prefix,
      options.blockIdleTtlMs,
      options.maxBlocksPerPool,
      leaseId,
      options.leaseTtlMs,
      blockHashes.length > 0 ? RECORD_BLOCKS_PER_CALL : 0,
      backendId,
      maxInflight,
      Math.max(0, Math.round(prefillTokens)),
      packBlockHashes(blockHashes),
    ]);
    const [taken, inflight, heldTo] = integerArrayReply(SCRIPTS.reserve, reply, 3) as [number, number, number];
    options.sawInflight(pool, backendId, inflight);
    if (taken === 1) await this.recordRestOfTaken(pool, backendId, blockHashes, heldTo);
    return taken === 1;
  }

  async renew(pool: string, backendId: BackendId, leaseId: string): Promise<boolean> {
    const { options } = this;
    const keys = options.layout.keys(pool, options.layout.cellOf(backendId));
    const reply = await runScript(
      options.redis,
      SCRIPTS.renew,
      [keys.prefill(backendId), keys.leaseDeadlines, keys.inflight, keys.pending],
      [options.nowMs(), leaseId, options.leaseTtlMs, keys.prefix, backendId],
    );
    return integerReply(SCRIPTS.renew, reply) === 1;
  }

  async prefillDone(
    pool: string,
    backendId: BackendId,
    leaseId: string,
    heldBlocks: readonly BlockHash[],
  ): Promise<void> {
    const { options } = this;
    const keys = options.layout.keys(pool, options.layout.cellOf(backendId));
    const reply = await runScript(
      options.redis,
      SCRIPTS.prefillDone,
      [keys.prefill(backendId), keys.pending, keys.forgotten, keys.ownersNew, keys.ownersOld, keys.generation],
      this.heldChainArgs(leaseId, backendId, heldBlocks),
    );
    const [, recordedTo] = integerArrayReply(SCRIPTS.prefillDone, reply, 2) as [number, number];
    await this.recordRest(pool, backendId, heldBlocks, recordedTo);
  }

  async release(pool: string, backendId: BackendId, leaseId: string, heldBlocks: readonly BlockHash[]): Promise<void> {
    const { options } = this;
    const keys = options.layout.keys(pool, options.layout.cellOf(backendId));
    const reply = await runScript(
      options.redis,
      SCRIPTS.release,
      [
        keys.prefill(backendId),
        keys.leaseDeadlines,
        keys.inflight,
        keys.pending,
        keys.forgotten,
        keys.ownersNew,
        keys.ownersOld,
        keys.generation,
      ],
      this.heldChainArgs(leaseId, backendId, heldBlocks),
    );
    const [, count, recordedTo] = integerArrayReply(SCRIPTS.release, reply, 3) as [number, number, number];
    options.sawInflight(pool, backendId, count);
    // The lease is gone whatever happens to the rest of the chain (an owner is a hint).
    if (heldBlocks.length > 0) await this.recordRestOfTaken(pool, backendId, heldBlocks, recordedTo);
  }

  /** prefill-done.lua's and release.lua's arguments: the lease, and the chain its first output proved held. */
  private heldChainArgs(leaseId: string, backendId: BackendId, heldBlocks: readonly BlockHash[]): (string | number)[] {
    const { options } = this;
    return [
      leaseId,
      backendId,
      options.nowMs(),
      options.blockIdleTtlMs,
      options.maxBlocksPerPool,
      packBlockHashes(heldBlocks),
      RECORD_BLOCKS_PER_CALL,
    ];
  }

  async forgetBackend(pool: string, backendId: BackendId): Promise<void> {
    const { options } = this;
    const keys = options.layout.keys(pool, options.layout.cellOf(backendId));
    const reply = await runScript(
      options.redis,
      SCRIPTS.forgetBackend,
      [keys.forgotten, keys.engine],
      [options.nowMs(), backendId, options.blockIdleTtlMs],
    );
    integerReply(SCRIPTS.forgetBackend, reply);
  }

  /**
   * recordRest once the lease is taken: the decision stands whatever happens to the recording (an
   * owner is a hint), so a failed call costs the next request's match, never this request's lease —
   * which a rejection here would strand in Redis until its TTL while the caller routed elsewhere.
   */
  async recordRestOfTaken(
    pool: string,
    backendId: BackendId,
    blockHashes: readonly BlockHash[],
    heldTo: number,
  ): Promise<void> {
    await this.recordRest(pool, backendId, blockHashes, heldTo).catch(() => undefined);
  }

  /**
   * Records the rest of a chain a script left over (it records at most RECORD_BLOCKS_PER_CALL new
   * blocks), one bounded call at a time: each sends the next blocks and the one before them, which
   * the backend must still hold (else a turn or a forget came in between and the chain starts over:
   * bounded all the same).
   */
  private async recordRest(
    pool: string,
    backendId: BackendId,
    blockHashes: readonly BlockHash[],
    heldTo: number,
  ): Promise<void> {
    const { options } = this;
    const keys = options.layout.keys(pool, options.layout.cellOf(backendId));
    const maxCalls = 2 * Math.ceil(blockHashes.length / RECORD_BLOCKS_PER_CALL) + 2;
    let held = heldTo;
    for (let calls = 0; held < blockHashes.length && calls < maxCalls; calls++) {
      const anchor = held > 0 ? blockHashArg(blockHashes[held - 1] as BlockHash) : '';
      const next = blockHashes.slice(held, held + RECORD_BLOCKS_PER_CALL);
      const reply = await runScript(
        options.redis,
        SCRIPTS.recordOwnership,
        [keys.forgotten, keys.ownersNew, keys.ownersOld, keys.generation],
        [
          backendId,
          options.nowMs(),
          options.blockIdleTtlMs,
          options.maxBlocksPerPool,
          anchor,
          packBlockHashes(next),
          RECORD_BLOCKS_PER_CALL,
        ],
      );
      const recorded = integerReply(SCRIPTS.recordOwnership, reply);
      held = recorded < 0 ? 0 : held + recorded;
    }
  }
}
