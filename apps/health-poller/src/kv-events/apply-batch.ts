import type { AppliedKvEvents, KvEventOp, KvEventsBatch } from '@kvroute/redis-store';
import type { BlockHash } from '@kvroute/routing';
import type { BlockNames } from './block-names';
import type { DecodedBatch, EngineHash } from './wire';

/** Writes one batch of one rank into one pool's owner index (KvEventsIndex.apply). */
export type ApplyToIndex = (pool: string, rankId: string, batch: KvEventsBatch) => Promise<AppliedKvEvents>;

/** The rank a stream belongs to and the pool its blocks go in (a LoRA adapter's go in the adapter's pool). */
export interface RankTarget {
  readonly rankId: string;
  readonly pool: string;
}

/** What one batch did, for the metrics. */
export interface BatchOutcome {
  storedBlocks: number;
  removedEntries: number;
  /** Stored blocks whose parent had no name (skipped), and chains that could not be rebuilt whole. */
  orphanBlocks: number;
  /** Removed blocks never named here (stored before the indexer saw them, or dropped from the map). */
  unknownHashes: number;
  /** Pool calls sent again with a whole chain (the index had lost the anchor: a turn, a forget). */
  chainsResent: number;
}

/** Pools a rank wrote to, at most this many remembered (a clear forgets the rank in each). */
const MAX_POOLS_PER_RANK = 64;

/**
 * Names a decoded batch's blocks (`names`) and applies it: one apply-kv-events.lua call per pool the
 * batch touches (one, unless LoRA adapters are in it), events in order. An AllBlocksCleared drops
 * the ops before it (the cache they describe is gone) and forgets the rank in every pool it wrote to.
 * A stored op whose anchor the index no longer holds (-1) is sent again as its whole chain from the
 * map, in one more call. `clear` forces a forget first (a resync). With `nameOnly` (a replay of
 * batches applied before: warming the names after a takeover) nothing is written.
 */
export async function applyDecodedBatch(
  apply: ApplyToIndex,
  target: RankTarget,
  names: BlockNames,
  pools: Set<string>,
  decoded: DecodedBatch,
  options: { readonly clear: boolean; readonly nameOnly: boolean },
): Promise<BatchOutcome> {
  const outcome: BatchOutcome = {
    storedBlocks: 0,
    removedEntries: 0,
    orphanBlocks: 0,
    unknownHashes: 0,
    chainsResent: 0,
  };
  let clear = options.clear;
  if (clear) names.forgetCopies();
  let byPool = new Map<string, { ops: KvEventOp[]; lasts: EngineHash[] }>();
  const opsOf = (pool: string) => {
    let entry = byPool.get(pool);
    if (entry === undefined) {
      entry = { ops: [], lasts: [] };
      byPool.set(pool, entry);
    }
    return entry;
  };
  for (const event of decoded.events) {
    if (event.kind === 'cleared') {
      clear = true;
      byPool = new Map();
      names.forgetCopies();
    } else if (event.kind === 'stored') {
      const named = names.nameStored(event);
      if (named === null) {
        outcome.orphanBlocks += event.hashes.length;
        continue;
      }
      const entry = opsOf(named.loraName ?? target.pool);
      entry.ops.push({ kind: 'stored', anchor: named.anchor, blocks: named.blocks });
      entry.lasts.push(named.last);
    } else {
      const perPool = new Map<string, BlockHash[]>();
      for (const hash of event.hashes) {
        const known = names.nameOf(hash);
        if (known === undefined) outcome.unknownHashes += 1;
        else if (names.release(hash)) {
          // Its engine's last copy (BlockNames.release): the rank no longer holds it.
          const pool = known.loraName ?? target.pool;
          const blocks = perPool.get(pool);
          if (blocks === undefined) perPool.set(pool, [known.name]);
          else blocks.push(known.name);
        }
      }
      for (const [pool, blocks] of perPool) opsOf(pool).ops.push({ kind: 'removed', blocks });
    }
  }
  if (options.nameOnly) return outcome;
  pools.add(target.pool);
  for (const pool of byPool.keys()) if (pools.size < MAX_POOLS_PER_RANK) pools.add(pool);
  const targets = clear ? new Set([...pools, ...byPool.keys()]) : new Set(byPool.keys());
  for (const pool of targets) {
    const entry = byPool.get(pool) ?? { ops: [], lasts: [] };
    const applied = await apply(pool, target.rankId, { clear, ops: entry.ops });
    outcome.removedEntries += applied.removedEntries;
    const resend: KvEventOp[] = [];
    let storedIndex = 0;
    for (const op of entry.ops) {
      if (op.kind !== 'stored') continue;
      const held = applied.stored[storedIndex] ?? 0;
      const last = entry.lasts[storedIndex] as EngineHash;
      storedIndex += 1;
      if (held >= 0) {
        outcome.storedBlocks += op.blocks.length;
        continue;
      }
      const chain = names.nameChain(last);
      if (chain === null) outcome.orphanBlocks += op.blocks.length;
      else resend.push({ kind: 'stored', anchor: null, blocks: chain });
    }
    if (resend.length > 0) {
      outcome.chainsResent += resend.length;
      const again = await apply(pool, target.rankId, { clear: false, ops: resend });
      again.stored.forEach((held, index) => {
        if (held >= 0) outcome.storedBlocks += (resend[index] as { blocks: readonly BlockHash[] }).blocks.length;
      });
    }
  }
  return outcome;
}
