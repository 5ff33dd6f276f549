import { describe, expect, it } from 'vitest';
import { Engine } from './engine';
import { runToIdle, traced, type Trace } from './engine-test-support';
import { getProfile } from './profiles';

/** 10 GB/s (1e7 bytes per ms) and 1 ms per pull: a100-8b's 128 KiB per token pull at ~76 tokens per ms. */
const LINK = { bytesPerMs: 1e7, setupMs: 1 };
const LEASE_MS = 30_000;

function engineWithLink(): Engine {
  return new Engine({ profile: getProfile('a100-8b'), version: 'v1', kvTransfer: { link: LINK, leaseMs: LEASE_MS } });
}

function prompt(length: number, seed: number): number[] {
  return Array.from({ length }, (_, index) => 1_000 + ((index * 7919 + seed * 104_729) % 30_000));
}

function runRequest(
  engine: Engine,
  tokens: number[],
  arrivalMs: number,
  extra: { remotePrefillTokens?: number; holdForRemoteDecode?: boolean } = {},
): { trace: Trace; cachedTokens: number | null; externalTokens: number; endMs: number } {
  const trace: Trace = { tokens: 0 };
  const sequence = engine.add({ ...traced(tokens, 4, trace), ...extra }, arrivalMs);
  const endMs = runToIdle(engine, arrivalMs);
  return { trace, cachedTokens: sequence.cachedTokens, externalTokens: sequence.externalTokens, endMs };
}

describe('prefill/decode KV transfer', () => {
  it(
    'decode side: pulls what the prefill side computed instead of computing it, and its first token comes after ' +
      'the pull, far sooner than a cold prefill',
    () => {
      const tokens = prompt(4_000, 1);
      const cold = runRequest(engineWithLink(), tokens, 0);
      const decode = engineWithLink();
      const pulled = runRequest(decode, tokens, 0, { remotePrefillTokens: tokens.length });
      expect(pulled.externalTokens).toBe(3_999);
      // vLLM counts the pulled tokens as cached at the request's first schedule.
      expect(pulled.cachedTokens).toBe(3_999);
      const pullMs = LINK.setupMs + (3_999 * getProfile('a100-8b').kvBytesPerToken) / LINK.bytesPerMs;
      expect(pulled.trace.ttftMs).toBeGreaterThan(pullMs);
      expect(pulled.trace.ttftMs).toBeLessThan((cold.trace.ttftMs as number) / 2);
      expect(decode.link?.transferBytes.count).toBe(1);
      expect(decode.stats.promptTokensBySource).toEqual({
        local_compute: 1,
        local_cache_hit: 0,
        external_kv_transfer: 3_999,
      });
      // The pulled blocks are the decode engine's own cache now.
      expect(decode.matchPrefixTokens(tokens)).toBe(Math.floor(3_999 / 16) * 16);
    },
  );

  it('decode side: pulls only the blocks its own cache lacks, and nothing on a full local hit', () => {
    const decode = engineWithLink();
    const tokens = prompt(4_000, 2);
    runRequest(decode, tokens.slice(0, 2_000), 0);
    const partial = runRequest(decode, tokens, 10_000, { remotePrefillTokens: tokens.length });
    // Every full block of the first prompt is cached (2,000 = 125 blocks); its outputs differ from the rest.
    const localHit = 2_000;
    expect(partial.externalTokens).toBe(3_999 - localHit);
    expect(decode.stats.promptTokensBySource.local_cache_hit).toBe(localHit);
    const full = runRequest(decode, tokens, 20_000, { remotePrefillTokens: tokens.length });
    expect(full.externalTokens).toBe(3_999 - Math.floor(3_999 / 16) * 16);
    expect(decode.link?.transferBytes.count).toBe(2);
  });

  it('concurrent pulls share the link: the second waits for the first', () => {
    const decode = engineWithLink();
    const first: Trace = { tokens: 0 };
    const second: Trace = { tokens: 0 };
    const a = prompt(4_000, 3);
    const b = prompt(4_000, 4);
    decode.add({ ...traced(a, 2, first), remotePrefillTokens: a.length }, 0);
    decode.add({ ...traced(b, 2, second), remotePrefillTokens: b.length }, 0);
    runToIdle(decode, 0);
    const pullMs = LINK.setupMs + (3_999 * getProfile('a100-8b').kvBytesPerToken) / LINK.bytesPerMs;
    expect((second.firstTokenAtMs as number) - (first.firstTokenAtMs as number)).toBeGreaterThanOrEqual(pullMs - 1);
  });

  it('prefill side: holds a finished request blocks until the decode side read them, or until the lease ends', () => {
    const prefill = engineWithLink();
    const freeBefore = prefill.pool.freeCount;
    const done = runRequest(prefill, prompt(1_600, 5), 0, { holdForRemoteDecode: true });
    expect(done.trace.reason).toBe('length');
    expect(prefill.holds.count).toBe(1);
    expect(prefill.pool.freeCount).toBeLessThan(freeBefore);
    const second = runRequest(prefill, prompt(1_600, 6), 100, { holdForRemoteDecode: true });
    expect(prefill.holds.count).toBe(2);
    prefill.planStep(second.endMs + LEASE_MS + 1);
    expect(prefill.holds.count).toBe(0);
    expect(prefill.holds.expiredRequests).toBe(2);
    expect(prefill.pool.freeCount).toBe(freeBefore);
  });

  it('prefill side: the decode side reading the blocks frees them at once, and they stay in the prefix cache', () => {
    const prefill = engineWithLink();
    const freeBefore = prefill.pool.freeCount;
    const tokens = prompt(1_600, 7);
    const trace: Trace = { tokens: 0 };
    const sequence = prefill.add({ ...traced(tokens, 1, trace), holdForRemoteDecode: true }, 0);
    runToIdle(prefill, 0);
    expect(prefill.holds.done(sequence.id)).toBe(true);
    expect(prefill.holds.done(sequence.id)).toBe(false);
    expect(prefill.pool.freeCount).toBe(freeBefore);
    expect(prefill.holds.expiredRequests).toBe(0);
    expect(prefill.matchPrefixTokens(tokens)).toBe(Math.floor(1_599 / 16) * 16);
  });
});
