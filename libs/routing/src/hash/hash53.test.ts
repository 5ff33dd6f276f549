import { describe, expect, it } from 'vitest';
import { HASH53_RANGE, hashTokenBlock53, TOKEN_CHAIN_ROOT } from './hash53';

describe('hashTokenBlock53', () => {
  const tokens = Array.from({ length: 64 }, (_, i) => (i * 7919) % 151_643);

  it('is a 53-bit integer that depends on the tokens, the chain before and the extra keys', () => {
    const first = hashTokenBlock53(tokens, 0, 16, TOKEN_CHAIN_ROOT);
    expect(Number.isSafeInteger(first) && first >= 0 && first < HASH53_RANGE).toBe(true);
    expect(hashTokenBlock53([...tokens], 0, 16, TOKEN_CHAIN_ROOT)).toBe(first);
    const changed = [...tokens];
    changed[15] = (changed[15] as number) + 1;
    expect(hashTokenBlock53(changed, 0, 16, TOKEN_CHAIN_ROOT)).not.toBe(first);
    expect(hashTokenBlock53(tokens, 0, 16, first)).not.toBe(first);
    expect(hashTokenBlock53(tokens, 0, 16, TOKEN_CHAIN_ROOT, 12_345)).not.toBe(first);
    expect(hashTokenBlock53(tokens, 0, 15, TOKEN_CHAIN_ROOT)).not.toBe(first);
  });

  it('reads a block in place: an offset into a longer array equals the block alone', () => {
    const second = hashTokenBlock53(tokens, 16, 16, 42);
    expect(hashTokenBlock53(tokens.slice(16, 32), 0, 16, 42)).toBe(second);
    expect(hashTokenBlock53(Uint32Array.from(tokens), 16, 16, 42)).toBe(second);
  });

  it('spreads: 10,000 blocks differing in one token give 10,000 hashes', () => {
    const seen = new Set<number>();
    const block = tokens.slice(0, 16);
    for (let i = 0; i < 10_000; i++) {
      block[i % 16] = i;
      seen.add(hashTokenBlock53(block, 0, 16, TOKEN_CHAIN_ROOT));
    }
    expect(seen.size).toBe(10_000);
  });
});
