import { describe, expect, it } from 'vitest';
import { CLUSTER_SLOT_COUNT, clusterKeySlot } from '@kvroute/testing';
import {
  blockHashArg,
  cellHashTag,
  poolHashTag,
  poolKeys,
  PACKED_BLOCK_WIDTH,
  packBlockHashes,
  responseOwnerKey,
} from './keys';

/** The part of a key Redis Cluster hashes: the first `{…}` with something inside, else the whole key. */
function clusterHashInput(key: string): string {
  const open = key.indexOf('{');
  if (open === -1) return key;
  const close = key.indexOf('}', open + 1);
  if (close === -1 || close === open + 1) return key;
  return key.slice(open + 1, close);
}

describe('poolKeys', () => {
  it('builds every key of a pool under one namespace and hash tag', () => {
    const keys = poolKeys('llama-3-8b');
    expect(keys.prefix).toBe('kvr:v1:{llama-3-8b}:');
    expect(keys.ownersNew).toBe('kvr:v1:{llama-3-8b}:owners:new');
    expect(keys.generation).toBe('kvr:v1:{llama-3-8b}:generation');
    expect(keys.prefill('10.0.0.1:8000')).toBe('kvr:v1:{llama-3-8b}:prefill:10.0.0.1:8000');
    expect(keys.forgotten).toBe('kvr:v1:{llama-3-8b}:forgotten');
    expect(keys.leaseDeadlines).toBe('kvr:v1:{llama-3-8b}:lease-deadlines');
    expect(keys.inflight).toBe('kvr:v1:{llama-3-8b}:inflight');
    expect(keys.pending).toBe('kvr:v1:{llama-3-8b}:pending');
    expect(poolKeys('m', 'test:ns').ownersOld).toBe('test:ns:{m}:owners:old');
  });

  it.each([
    'llama-3-8b',
    'org/model:Q4',
    'odd{name}',
    '}{',
    '',
    'a'.repeat(40),
    'da39a3ee5e6b4b0d3255bfef95601890afd80709',
  ])('puts every key of pool %j in one cluster slot, whatever its backend ids', (pool) => {
    const keys = poolKeys(pool);
    const all = [
      keys.ownersNew,
      keys.ownersOld,
      keys.generation,
      keys.forgotten,
      keys.prefill('b{1}'),
      keys.prefill('}x{'),
      keys.leaseDeadlines,
      keys.inflight,
      keys.pending,
    ];
    const inputs = new Set(all.map(clusterHashInput));
    expect(inputs.size).toBe(1);
    expect([...inputs][0]).toBe(poolHashTag(pool));
  });

  it('uses the model name as the tag when it can, else its SHA-1, and never maps two pools to one tag', () => {
    expect(poolHashTag('llama-3-8b')).toBe('llama-3-8b');
    expect(poolHashTag('odd{name}')).toMatch(/^[0-9a-f]{40}$/);
    expect(poolHashTag('')).toMatch(/^[0-9a-f]{40}$/);
    // A name that looks like a digest is digested too, so it cannot collide with the digest of another name.
    const digestOfEmpty = poolHashTag('');
    expect(poolHashTag(digestOfEmpty)).not.toBe(digestOfEmpty);
  });

  it.each(['bench-model', 'llama-3-8b', 'meta-llama/Llama-3.1-8B-Instruct', 'odd{name}'])(
    'puts cell i of n of pool %j in the i-th of n equal slot ranges (one master each on an evenly sliced cluster)',
    (pool) => {
      for (const count of [2, 3, 6, 8]) {
        const tags = new Set<string>();
        for (let index = 0; index < count; index++) {
          const keys = poolKeys(pool, 'kvr:v1', { index, count });
          const inputs = new Set([keys.ownersNew, keys.prefill('b{1}'), keys.leaseDeadlines].map(clusterHashInput));
          expect(inputs.size).toBe(1);
          const tag = [...inputs][0] as string;
          tags.add(tag);
          expect(tag.startsWith(`${poolHashTag(pool)}#${index}-`)).toBe(true);
          // The slot as @kvroute/testing computes it (its own CRC16), within the slots `redis-cli --cluster
          // create` gives master `index` of `count` (boundaries rounded: lround).
          const slot = clusterKeySlot(keys.prefix);
          expect(slot).toBeGreaterThanOrEqual(Math.round((index * CLUSTER_SLOT_COUNT) / count));
          expect(slot).toBeLessThanOrEqual(Math.round(((index + 1) * CLUSTER_SLOT_COUNT) / count) - 1);
        }
        expect(tags.size).toBe(count);
      }
    },
  );

  it("keeps a pool that is not split on its own tag, and no model's name can take a cell's", () => {
    expect(poolKeys('m', 'kvr:v1', { index: 0, count: 1 }).prefix).toBe(poolKeys('m').prefix);
    expect(cellHashTag('m', { index: 0, count: 1 })).toBe('m');
    const cellTag = cellHashTag('m', { index: 1, count: 3 });
    // A model named like a cell is digested, so its keys never meet the cell's; other names with `#` keep theirs.
    expect(poolHashTag(cellTag)).toMatch(/^[0-9a-f]{40}$/);
    expect(poolHashTag('team#7/model')).toBe('team#7/model');
    expect(() => poolKeys('m', 'kvr:v1', { index: 3, count: 3 })).toThrow(RangeError);
    expect(() => poolKeys('m', 'kvr:v1', { index: 0, count: 65 })).toThrow(RangeError);
  });

  it('writes block hashes as exact decimal integers', () => {
    expect(blockHashArg(9_007_199_254_740_991)).toBe('9007199254740991');
    expect(blockHashArg(0)).toBe('0');
    expect(() => blockHashArg(1.5)).toThrow(RangeError);
    expect(() => blockHashArg(-1)).toThrow(RangeError);
  });

  it('packs a chain into one fixed-width argument, 17 bytes per block, the same string for the same chain', () => {
    const chain = [9_007_199_254_740_991, 0, 1_234_567];
    const packed = packBlockHashes(chain);
    expect(packed).toBe('9007199254740991,               0,         1234567,');
    expect(packed).toHaveLength(PACKED_BLOCK_WIDTH * chain.length);
    expect(packBlockHashes(chain)).toBe(packed);
    expect(packBlockHashes([])).toBe('');
    expect(() => packBlockHashes([2 ** 53])).toThrow(RangeError);
  });
});

describe('responseOwnerKey', () => {
  it("hashes on the response id's own tag, so responses spread over the slots, whatever the scope", () => {
    const open = responseOwnerKey('', 'resp_1');
    const tenant = responseOwnerKey('tenant\u0000acme', 'resp_1');
    expect(open).toBe('kvr:v1:{resp:resp_1}:owner:open');
    expect(clusterHashInput(tenant)).toBe('resp:resp_1');
    expect(tenant).not.toBe(open);
    expect(tenant).toMatch(/^kvr:v1:\{resp:resp_1\}:owner:[0-9a-f]{40}$/);
    expect(responseOwnerKey('tenant\u0000other', 'resp_1')).not.toBe(tenant);
    const slots = new Set(
      Array.from({ length: 50 }, (_, index) => clusterKeySlot(responseOwnerKey('', `resp_${index}`))),
    );
    expect(slots.size).toBeGreaterThan(40);
    expect([...slots].every((slot) => slot >= 0 && slot < CLUSTER_SLOT_COUNT)).toBe(true);
  });
});
