import { BLOCK_SIZE_TOKENS } from './profiles';

/** What the KV events need of a cached block (kv-events/kv-event-recorder.ts fills it while events are on). */
export interface BlockEventInfo {
  /** vLLM's 32-byte block hash (sha256_cbor) of the prefix ending with this block. */
  readonly digest: Uint8Array;
  /** The parent block's digest; null for a prompt's first block. */
  readonly parent: Uint8Array | null;
  /** The block's token ids. */
  readonly tokens: readonly number[];
}

/** Pool changes the KV events report (vLLM's BlockPool queues BlockRemoved and AllBlocksCleared itself). */
export interface PoolEventSink {
  /** A cached block is about to lose its hash because allocation reuses it (LRU eviction). */
  blockEvicted(block: KvBlock): void;
  /** Every cached prefix was forgotten. */
  cacheCleared(): void;
}

/**
 * The KV-cache block pool with automatic prefix caching, modelled on vLLM V1's BlockPool
 * (`vllm/v1/core/block_pool.py`, read for this; see README "Cache timing"):
 * - `numGpuBlocks` blocks; block 0 is vLLM's reserved null block, so `numGpuBlocks − 1` are usable.
 * - A block is either referenced by running requests (pinned) or free. Free blocks sit in one queue
 *   whose head is evicted first; allocation takes from the head and, if the block still holds a
 *   cached prefix, evicts that entry. So cached blocks are only lost when space is needed.
 * - A full block's chained hash is registered by the engine (`cacheFullBlock`: when the step that
 *   computes it is scheduled, or when it ends with `cacheAt: step-end`); a later request whose prefix
 *   hashes to it reuses it (a hit pulls it out of the free queue).
 * - No de-duplication, as vLLM: two blocks computed for the same prefix are both registered; a hit
 *   takes the earliest registered one still cached, and evicting one leaves the other hittable.
 * - Freed requests return blocks in reverse order (`release`): those holding a cached prefix join the
 *   queue's tail, so a prefix's tail is evicted before its head and the least recently freed first;
 *   those holding none (a partial last block) go to the head, reused before any cached block.
 * Invariant: freeCount + referenced blocks = numGpuBlocks − 1.
 */
export class KvBlock {
  refCount = 0;
  /** Chained hash of the prefix ending with this block, once it is full and cached. */
  hash: number | null = null;
  prev: KvBlock | null = null;
  next: KvBlock | null = null;
  inFreeQueue = false;
  /** Set while the block is cached and KV events are on; cleared with `hash`. */
  event: BlockEventInfo | null = null;
  constructor(readonly id: number) {}
}

export class BlockPool {
  private readonly blocks: KvBlock[];
  /** Hash → the earliest registered block still cached under it (the one a hit takes). */
  private readonly cachedByHash = new Map<number, KvBlock>();
  /** Hash → later blocks registered under the same hash, oldest first (rare: see cacheFullBlock). */
  private readonly duplicatesByHash = new Map<number, KvBlock[]>();
  private head: KvBlock | null = null;
  private tail: KvBlock | null = null;
  private freeBlocks = 0;
  /** Cached blocks evicted to make room, since start. */
  evictions = 0;

  constructor(
    readonly numGpuBlocks: number,
    private readonly events: PoolEventSink | null = null,
  ) {
    if (numGpuBlocks < 2) throw new Error('numGpuBlocks must be at least 2');
    this.blocks = [];
    for (let id = 1; id < numGpuBlocks; id++) {
      const block = new KvBlock(id);
      this.blocks.push(block);
      this.appendFree(block);
    }
  }

  get usableBlocks(): number {
    return this.numGpuBlocks - 1;
  }

  /** Free blocks, counting evictable cached ones (vLLM's `get_num_free_blocks`). */
  get freeCount(): number {
    return this.freeBlocks;
  }

  /** Distinct cached prefixes (vLLM's `len(cached_block_hash_to_block)`); duplicates not counted. */
  get cachedBlockCount(): number {
    return this.cachedByHash.size;
  }

  /** KV usage as vLLM reports it: 1 − free / (num_gpu_blocks − 1); evictable cached blocks count as free. */
  usage(): number {
    return 1 - this.freeBlocks / this.usableBlocks;
  }

  /** Number of leading hashes whose blocks are cached, stopping at the first miss. No side effects. */
  countCachedPrefix(hashes: readonly number[], maxBlocks: number): number {
    const limit = Math.min(hashes.length, maxBlocks);
    let hits = 0;
    while (hits < limit && this.cachedByHash.has(hashes[hits] as number)) hits++;
    return hits;
  }

  /** Of the first `count` hashes (all cached), how many blocks sit in the free queue (a hit takes them out). */
  countFreeAmongCached(hashes: readonly number[], count: number): number {
    let free = 0;
    for (let i = 0; i < count; i++) if (this.cachedByHash.get(hashes[i] as number)?.inFreeQueue) free++;
    return free;
  }

  /** Takes a reference on the first `count` cached blocks (they must be cached: see countCachedPrefix). */
  touchCached(hashes: readonly number[], count: number): KvBlock[] {
    const taken: KvBlock[] = [];
    for (let i = 0; i < count; i++) {
      const block = this.cachedByHash.get(hashes[i] as number);
      if (!block) throw new Error('touchCached: hash not cached');
      if (block.inFreeQueue) this.removeFree(block);
      block.refCount++;
      taken.push(block);
    }
    return taken;
  }

  /** Allocates `count` fresh blocks, evicting cached ones from the LRU head; null if too few are free. */
  allocate(count: number): KvBlock[] | null {
    if (count > this.freeBlocks) return null;
    const taken: KvBlock[] = [];
    for (let i = 0; i < count; i++) {
      const block = this.head as KvBlock;
      this.removeFree(block);
      if (block.hash !== null) {
        this.events?.blockEvicted(block);
        this.uncache(block, block.hash);
        this.evictions++;
      }
      block.refCount = 1;
      taken.push(block);
    }
    return taken;
  }

  /**
   * Registers a full block under its chained hash. A block already registered (a hit) is left alone.
   * If another block already holds this prefix, both stay registered (vLLM does not de-duplicate, so
   * that block tables stay append-only): it happens when a fully cached prompt recomputes its last
   * block, or when two identical sequences fill the same generated block.
   */
  cacheFullBlock(block: KvBlock, hash: number): void {
    if (block.hash !== null) return;
    block.hash = hash;
    block.event = null;
    if (!this.cachedByHash.has(hash)) {
      this.cachedByHash.set(hash, block);
      return;
    }
    const duplicates = this.duplicatesByHash.get(hash);
    if (duplicates) duplicates.push(block);
    else this.duplicatesByHash.set(hash, [block]);
  }

  /**
   * Drops one reference on each of a request's blocks (given in request order), tail first, as vLLM's
   * `KVCacheManager.free` + `BlockPool.free_blocks` do. Blocks that reach zero join the free queue:
   * cached ones at the tail, last block first, so a prefix's tail is evicted before its head; uncached
   * ones at the head, reused before any cached block since they hold nothing to hit.
   */
  release(blocks: readonly KvBlock[]): void {
    const fresh: KvBlock[] = [];
    for (let i = blocks.length - 1; i >= 0; i--) {
      const block = blocks[i] as KvBlock;
      block.refCount--;
      if (block.refCount !== 0) continue;
      if (block.hash === null) fresh.push(block);
      else this.appendFree(block);
    }
    // The first fresh block freed ends up at the head.
    for (let i = fresh.length - 1; i >= 0; i--) this.prependFree(fresh[i] as KvBlock);
  }

  /** Forgets every cached prefix (vLLM's reset_prefix_cache); referenced blocks stay allocated. */
  resetCache(): void {
    for (const block of this.cachedBlocks()) {
      block.hash = null;
      block.event = null;
    }
    this.cachedByHash.clear();
    this.duplicatesByHash.clear();
    this.events?.cacheCleared();
  }

  /** Every block holding a cached prefix, duplicates included (what a hit or an eviction can touch). */
  *cachedBlocks(): IterableIterator<KvBlock> {
    yield* this.cachedByHash.values();
    for (const duplicates of this.duplicatesByHash.values()) yield* duplicates;
  }

  /** Removes `block` from the cache; if it was the block hits take, the next registered copy takes over. */
  private uncache(block: KvBlock, hash: number): void {
    block.hash = null;
    block.event = null;
    const duplicates = this.duplicatesByHash.get(hash);
    if (this.cachedByHash.get(hash) === block) {
      const next = duplicates?.shift();
      if (next) this.cachedByHash.set(hash, next);
      else this.cachedByHash.delete(hash);
    } else if (duplicates) {
      const index = duplicates.indexOf(block);
      if (index !== -1) duplicates.splice(index, 1);
    }
    if (duplicates && duplicates.length === 0) this.duplicatesByHash.delete(hash);
  }

  private appendFree(block: KvBlock): void {
    block.inFreeQueue = true;
    block.prev = this.tail;
    block.next = null;
    if (this.tail) this.tail.next = block;
    else this.head = block;
    this.tail = block;
    this.freeBlocks++;
  }

  private prependFree(block: KvBlock): void {
    block.inFreeQueue = true;
    block.prev = null;
    block.next = this.head;
    if (this.head) this.head.prev = block;
    else this.tail = block;
    this.head = block;
    this.freeBlocks++;
  }

  private removeFree(block: KvBlock): void {
    if (block.prev) block.prev.next = block.next;
    else this.head = block.next;
    if (block.next) block.next.prev = block.prev;
    else this.tail = block.prev;
    block.prev = null;
    block.next = null;
    block.inFreeQueue = false;
    this.freeBlocks--;
  }
}

/** Blocks needed to hold `tokens` tokens. */
export function blocksFor(tokens: number): number {
  return Math.ceil(tokens / BLOCK_SIZE_TOKENS);
}
