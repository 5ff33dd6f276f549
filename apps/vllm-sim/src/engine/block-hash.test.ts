import { describe, expect, it } from 'vitest';
import { hashFullBlocks, rootHash } from './block-hash';

describe('block hashes and cache_salt', () => {
  const tokens = Array.from({ length: 48 }, (_, index) => (index * 7919) % 100_000);

  it('leaves unsalted hashes exactly as they were before cache_salt was validated (golden values)', () => {
    expect(rootHash()).toBe(461845907);
    expect(hashFullBlocks(tokens)).toEqual([5760905532263012, 7174844367627040, 5972455495871022]);
    expect(hashFullBlocks(tokens, '')).toEqual(hashFullBlocks(tokens));
  });

  it('gives every block of a salted prompt a hash of its own per salt, and the same salt the same chain', () => {
    const unsalted = hashFullBlocks(tokens);
    const saltA = hashFullBlocks(tokens, 'tenant-a');
    const saltB = hashFullBlocks(tokens, 'tenant-b');
    expect(hashFullBlocks(tokens, 'tenant-a')).toEqual(saltA);
    for (let block = 0; block < unsalted.length; block++) {
      expect(new Set([unsalted[block], saltA[block], saltB[block]]).size).toBe(3);
    }
  });

  it('separates salts that differ in one character, or only in order', () => {
    const first = (salt: string): number | undefined => hashFullBlocks(tokens, salt)[0];
    const salts = ['tenant-a', 'tenant-b', 'tenant-', 'tenant-aa', 'tneant-a', 'a-tnanet'];
    expect(new Set(salts.map(first)).size).toBe(salts.length);
  });
});
