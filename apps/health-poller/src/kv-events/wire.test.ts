import { buildTokenRoutingRequest } from '@kvroute/routing';
import { Packr } from 'msgpackr';
import { describe, expect, it } from 'vitest';
import { BlockNames } from './block-names';
import { decodeBatch, type StoredEvent } from './wire';

const packr = new Packr({ useRecords: false, int64AsType: 'bigint' });
const LIMITS = { maxBatchEvents: 1000, maxBatchBlocks: 10_000, maxBatchBytes: 1 << 20 };
const tokens = Array.from({ length: 48 }, (_, i) => (i * 7919) % 150_000);

/** A map-encoded BlockStored of 3 blocks as vLLM 0.26 sends it, `extraKeys` per block. */
function stored(extraKeys: unknown[], loraName: string | null = null): StoredEvent {
  const event = {
    type: 'BlockStored',
    block_hashes: [1n, 2n, 3n],
    parent_block_hash: null,
    token_ids: tokens,
    block_size: 16,
    lora_id: null,
    medium: 'GPU',
    lora_name: loraName,
    extra_keys: extraKeys,
    group_idx: 0,
  };
  const batch = decodeBatch(packr.pack([1.5, [event], 0]), LIMITS);
  expect(batch.malformed).toBe(0);
  return batch.events[0] as StoredEvent;
}

describe('KV-event extra keys', () => {
  it("names a salted chain as the router names the same prompt with its cache_salt: the salt from block 0's extra keys", () => {
    const event = stored([['tenant-a'], null, null]);
    expect(event.cacheSalt).toBe('tenant-a');
    const names = new BlockNames(100).nameStored(event);
    const routed = buildTokenRoutingRequest({ model: 'm', prompt: 'x', cache_salt: 'tenant-a' }, tokens, {
      blockSizeTokens: 16,
    });
    expect(names?.blocks).toEqual(routed.blockHashes);
    const unsalted = buildTokenRoutingRequest({ model: 'm', prompt: 'x' }, tokens, { blockSizeTokens: 16 });
    expect(names?.blocks[0]).not.toBe(unsalted.blockHashes[0]);
  });

  it('finds no salt in an adapter name alone, in multimodal keys, or without extra keys', () => {
    expect(stored([['sql-lora'], ['sql-lora'], ['sql-lora']], 'sql-lora').cacheSalt).toBe(null);
    expect(stored([['sql-lora', 'tenant-a'], ['sql-lora'], ['sql-lora']], 'sql-lora').cacheSalt).toBe('tenant-a');
    expect(stored([[['image-hash', 0]], null, null]).cacheSalt).toBe(null);
    expect(stored([null, null, null]).cacheSalt).toBe(null);
    expect(new BlockNames(100).nameStored(stored([null, null, null]))?.blocks).toEqual(
      buildTokenRoutingRequest({ model: 'm', prompt: 'x' }, tokens, { blockSizeTokens: 16 }).blockHashes,
    );
  });
});

describe('KV-event byte and block-size bounds', () => {
  it('drops a payload over maxBatchBytes before unpacking it, and reads a block_size over 4096 as malformed', () => {
    const small = packr.pack([1.5, [['AllBlocksCleared']], 0]);
    expect(decodeBatch(small, { ...LIMITS, maxBatchBytes: small.length }).events).toHaveLength(1);
    // One byte over: refused whole, whatever it holds (here not even msgpack).
    const big = Buffer.concat([small, Buffer.from([0xc1])]);
    expect(() => decodeBatch(big, { ...LIMITS, maxBatchBytes: small.length })).toThrow(
      expect.objectContaining({ name: 'KvEventsWireError', problem: 'oversized_batch' }),
    );
    const huge = (blockSize: number) =>
      decodeBatch(
        packr.pack([
          1.5,
          [['BlockStored', [7n], null, Array.from({ length: blockSize }, (_, i) => i), blockSize, null, 'GPU']],
        ]),
        LIMITS,
      );
    expect(huge(4096).events).toHaveLength(1);
    expect(huge(4097)).toMatchObject({ events: [], malformed: 1 });
  });
});
