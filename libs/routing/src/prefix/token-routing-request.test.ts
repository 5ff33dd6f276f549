import { describe, expect, it } from 'vitest';
import { hashTokenBlock53, TOKEN_CHAIN_ROOT, tokenBlockExtra } from '../hash/hash53';
import { estimatePrefillTokens } from './prefill-estimate';
import { buildTokenRoutingRequest } from './token-routing-request';

const tokens = Array.from({ length: 100 }, (_, i) => (i * 31 + 7) % 50_000);
const chat = { model: 'm', messages: [{ role: 'user' as const, content: 'x' }] };

describe('buildTokenRoutingRequest', () => {
  it('names each full block of 16 tokens by the chain of hashTokenBlock53, as the indexer names stored blocks', () => {
    const request = buildTokenRoutingRequest(chat, tokens, { blockSizeTokens: 16 });
    expect(request.blockHashes).toHaveLength(6); // 100 tokens: 6 full blocks, the last 4 tokens are not named
    let previous = TOKEN_CHAIN_ROOT;
    for (let i = 0; i < 6; i++) {
      previous = hashTokenBlock53(tokens.slice(i * 16, i * 16 + 16), 0, 16, previous);
      expect(request.blockHashes[i]).toBe(previous);
    }
    expect(request).toMatchObject({
      unit: 'tokens',
      textBytes: 100,
      blockSizeBytes: 16,
      headHash: request.blockHashes[0],
    });
  });

  it('keys block 0 by the cache_salt, so salted prompts share no block with others', () => {
    const plain = buildTokenRoutingRequest(chat, tokens, { blockSizeTokens: 16 });
    const salted = buildTokenRoutingRequest({ ...chat, cache_salt: 'tenant-a' }, tokens, { blockSizeTokens: 16 });
    const other = buildTokenRoutingRequest({ ...chat, cache_salt: 'tenant-b' }, tokens, { blockSizeTokens: 16 });
    expect(salted.blockHashes[0]).toBe(
      hashTokenBlock53(tokens, 0, 16, TOKEN_CHAIN_ROOT, tokenBlockExtra(null, 'tenant-a', true)),
    );
    for (let i = 0; i < 6; i++) {
      expect(salted.blockHashes[i]).not.toBe(plain.blockHashes[i]);
      expect(salted.blockHashes[i]).not.toBe(other.blockHashes[i]);
    }
  });

  it('stops at maxBlocks, keeps the whole prompt in textBytes, and estimates prefill in tokens', () => {
    const request = buildTokenRoutingRequest(chat, tokens, { blockSizeTokens: 16, maxBlocks: 2 });
    expect(request.blockHashes).toHaveLength(2);
    // 100 tokens, 2 blocks of 16 held: 68 to prefill, whatever the bytes-per-token ratio in use.
    expect(estimatePrefillTokens(request, 2, 4)).toBe(68);
  });

  it('gives a prompt shorter than a block no block but a head hash for cold placement', () => {
    const request = buildTokenRoutingRequest(chat, tokens.slice(0, 10), { blockSizeTokens: 16 });
    expect(request.blockHashes).toEqual([]);
    expect(request.headHash).toBe(hashTokenBlock53(tokens, 0, 10, TOKEN_CHAIN_ROOT));
  });
});
