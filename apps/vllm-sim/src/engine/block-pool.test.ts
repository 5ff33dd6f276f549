import { describe, expect, it } from 'vitest';
import { BlockPool, type KvBlock } from './block-pool';

/** Eviction order and duplicate prefixes, as vLLM V1's BlockPool (README "Cache timing"). */
describe('BlockPool', () => {
  it('keeps a prefix hittable while any block registered under it is cached (no de-duplication)', () => {
    const pool = new BlockPool(1 + 4);
    const [first, second] = pool.allocate(2) as KvBlock[];
    pool.cacheFullBlock(first as KvBlock, 7);
    pool.cacheFullBlock(second as KvBlock, 7); // the same prefix computed again (e.g. a recomputed last block)
    expect(pool.cachedBlockCount).toBe(1);
    pool.release([first as KvBlock]);
    pool.release([second as KvBlock]);
    // Free queue: the two never-used blocks, then `first`, then `second`. Three allocations evict `first`.
    pool.allocate(3);
    expect(pool.evictions).toBe(1);
    expect(pool.countCachedPrefix([7], 1)).toBe(1);
    expect(pool.touchCached([7], 1)).toEqual([second]);
  });

  it('a hit takes the earliest registered copy', () => {
    const pool = new BlockPool(1 + 2);
    const [first, second] = pool.allocate(2) as KvBlock[];
    pool.cacheFullBlock(second as KvBlock, 9);
    pool.cacheFullBlock(first as KvBlock, 9);
    pool.release([first as KvBlock, second as KvBlock]);
    expect(pool.touchCached([9], 1)).toEqual([second]);
  });

  it('reuses a freed uncached block first, then evicts cached ones least recently freed first, a prefix tail first', () => {
    const pool = new BlockPool(1 + 4);
    const [older] = pool.allocate(1) as KvBlock[];
    pool.cacheFullBlock(older as KvBlock, 100);
    pool.release([older as KvBlock]);
    // A request with two full blocks (prefix 1 → 2) and a partial last one that holds no prefix.
    const request = pool.allocate(3) as KvBlock[];
    pool.cacheFullBlock(request[0] as KvBlock, 1);
    pool.cacheFullBlock(request[1] as KvBlock, 2);
    pool.release(request);
    expect(pool.freeCount).toBe(4);

    expect(pool.allocate(1)).toEqual([request[2]]);
    expect(pool.evictions).toBe(0);
    expect(pool.countCachedPrefix([100], 1)).toBe(1);

    expect(pool.allocate(1)).toEqual([older]);
    expect(pool.countCachedPrefix([100], 1)).toBe(0);
    expect(pool.allocate(1)).toEqual([request[1]]);
    expect(pool.countCachedPrefix([1, 2], 2)).toBe(1);
    expect(pool.evictions).toBe(2);
  });

  it('resetCache forgets duplicates too', () => {
    const pool = new BlockPool(1 + 2);
    const [first, second] = pool.allocate(2) as KvBlock[];
    pool.cacheFullBlock(first as KvBlock, 5);
    pool.cacheFullBlock(second as KvBlock, 5);
    pool.resetCache();
    expect(pool.countCachedPrefix([5], 1)).toBe(0);
    expect(second?.hash).toBeNull();
    pool.release([first as KvBlock, second as KvBlock]);
    pool.allocate(2);
    expect(pool.evictions).toBe(0);
  });
});
