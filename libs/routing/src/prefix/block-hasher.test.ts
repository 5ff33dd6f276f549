import type { ChatCompletionRequest, ChatMessage } from '@kvroute/protocols';
import { describe, expect, it } from 'vitest';
import { hashRoutingText, routedTextUnits } from './block-hasher';
import { buildRoutingRequest } from './routing-request';
import { renderRoutingText } from './routing-text';

const plain = (text: string, contextEndOffset = 0) => ({ text, contextEndOffset });
const ascii = (length: number, seed = 0) =>
  Array.from({ length }, (_v, i) => String.fromCharCode(97 + ((i * 7 + seed) % 26))).join('');

describe('hashRoutingText', () => {
  it('hashes only full blocks, counting UTF-8 bytes', () => {
    // 'é' is 2 bytes, '🚀' is 4: 10 + 2 + 4 = 16 bytes → two full 8-byte blocks; 17 bytes → still two.
    expect(hashRoutingText(plain('abcdefghijé🚀'), 8)).toMatchObject({ textBytes: 16, contextBlocks: 0 });
    expect(hashRoutingText(plain('abcdefghijé🚀'), 8).blockHashes).toHaveLength(2);
    expect(hashRoutingText(plain('abcdefghijé🚀x'), 8).blockHashes).toHaveLength(2);
    expect(hashRoutingText(plain(''), 8)).toMatchObject({ blockHashes: [], textBytes: 0 });
  });

  it.each([0, 1, 5, 9])(
    'changes hashes from block %i on, never before, when one byte of that block changes',
    (block) => {
      const blockSize = 32;
      const text = ascii(blockSize * 10 + 5);
      const at = block * blockSize + 17;
      const changed = text.slice(0, at) + (text[at] === 'z' ? 'y' : 'z') + text.slice(at + 1);
      const a = hashRoutingText(plain(text), blockSize).blockHashes;
      const b = hashRoutingText(plain(changed), blockSize).blockHashes;
      expect(b.slice(0, block)).toEqual(a.slice(0, block));
      for (let i = block; i < a.length; i++) expect(b[i]).not.toBe(a[i]);
    },
  );

  it('produces 53-bit integers, distinct across many blocks', () => {
    const { blockHashes } = hashRoutingText(plain(ascii(64 * 5000, 3)), 64);
    for (const hash of blockHashes) {
      expect(Number.isSafeInteger(hash)).toBe(true);
      expect(hash).toBeGreaterThanOrEqual(0);
    }
    expect(new Set(blockHashes).size).toBe(blockHashes.length);
  });

  it('handles block sizes that are not a multiple of 4', () => {
    const a = hashRoutingText(plain('abcdefg' + 'hijklmn'), 7).blockHashes;
    const b = hashRoutingText(plain('abcdefg' + 'hijklmX'), 7).blockHashes;
    expect(a).toHaveLength(2);
    expect(b[0]).toBe(a[0]);
    expect(b[1]).not.toBe(a[1]);
  });

  it('uses the first block as the head hash, or the whole text when shorter than a block', () => {
    const long = hashRoutingText(plain(ascii(200)), 64);
    expect(long.headHash).toBe(long.blockHashes[0]);
    const shortA = hashRoutingText(plain('short prompt'), 64);
    const shortB = hashRoutingText(plain('short prompt!'), 64);
    expect(shortA.blockHashes).toEqual([]);
    expect(shortA.headHash).not.toBe(shortB.headHash);
    expect(hashRoutingText(plain('short prompt'), 64).headHash).toBe(shortA.headHash);
  });

  it('counts context blocks in bytes before the last message', () => {
    // 30 two-byte characters = 60 bytes of context → 3 full 16-byte blocks (48 bytes), not 1 (30 units).
    const context = 'é'.repeat(30);
    const hashed = hashRoutingText(plain(context + ascii(100), context.length), 16);
    expect(hashed.contextBlocks).toBe(3);
    expect(hashed.textBytes).toBe(160);
    // Encoding in two parts must not change the hashes.
    expect(hashed.blockHashes).toEqual(hashRoutingText(plain(context + ascii(100)), 16).blockHashes);
  });

  it('keeps its hash values across releases (they key the shared prefix index)', () => {
    expect(hashRoutingText(plain('The quick brown fox jumps over the lazy dog'), 16).blockHashes).toEqual([
      8935389778710330, 3619617509281854,
    ]);
  });

  it('rejects a block size that is not a positive integer', () => {
    expect(() => hashRoutingText(plain('x'), 0)).toThrow(RangeError);
    expect(() => hashRoutingText(plain('x'), 1.5)).toThrow(RangeError);
  });

  it('hashes a 10 KB routing text in well under a millisecond', () => {
    const text = ascii(10_240);
    const rounds = 5000;
    for (let i = 0; i < 2000; i++) hashRoutingText(plain(text), 64);
    const start = performance.now();
    for (let i = 0; i < rounds; i++) hashRoutingText(plain(text), 64);
    const microseconds = ((performance.now() - start) * 1000) / rounds;
    console.info(`hashRoutingText: ${microseconds.toFixed(1)} µs per 10 KB (64-byte blocks)`);
    expect(microseconds).toBeLessThan(1000);
  });
});

describe('hashRoutingText with maxBlocks', () => {
  const text = ascii(64 * 100 + 10, 5);

  it('hashes only the first maxBlocks blocks, the same hashes as without a cap, and keeps the whole length', () => {
    const all = hashRoutingText(plain(text, 64 * 80), 64);
    const capped = hashRoutingText(plain(text, 64 * 80), 64, 30);
    expect(capped.blockHashes).toEqual(all.blockHashes.slice(0, 30));
    expect(capped.textBytes).toBe(all.textBytes);
    expect(capped.headHash).toBe(all.headHash);
    expect(capped.contextBlocks).toBe(30);
    expect(hashRoutingText(plain(text, 64 * 80), 64, 1000)).toEqual(all);
  });

  it('hashes the last kept block whole when a multi-byte character straddles its end', () => {
    // 'é' is 2 bytes: 63 ASCII bytes then 'é' puts the character across the end of block 0.
    const straddling = 'a'.repeat(63) + 'é'.repeat(200);
    expect(hashRoutingText(plain(straddling), 64, 1).blockHashes).toEqual(
      hashRoutingText(plain(straddling), 64).blockHashes.slice(0, 1),
    );
    const rocket = 'b'.repeat(62) + '🚀'.repeat(100);
    expect(hashRoutingText(plain(rocket), 64, 2).blockHashes).toEqual(
      hashRoutingText(plain(rocket), 64).blockHashes.slice(0, 2),
    );
  });

  it('costs a bounded time on a huge text', () => {
    const huge = 'abcdefghijklmnop'.repeat((1024 * 1024 * 15) / 16);
    const started = performance.now();
    const hashed = hashRoutingText(plain(huge, 10 * 1024 * 1024), 16, 2048);
    expect(performance.now() - started).toBeLessThan(200);
    expect(hashed).toMatchObject({ textBytes: 15 * 1024 * 1024, contextBlocks: 2048 });
    expect(hashed.blockHashes).toHaveLength(2048);
  });

  it('rejects a cap that is not an integer ≥ 1', () => {
    expect(() => hashRoutingText(plain('x'), 8, 0)).toThrow(RangeError);
    expect(() => hashRoutingText(plain('x'), 8, 2.5)).toThrow(RangeError);
  });
});

describe('the request path (rendered straight into bytes) against the rendered text', () => {
  /** A conversation past 128 KB: non-ASCII, surrogate pairs, an escaped separator, one value longer than the kept text at small caps. */
  function longChat(totalBytes: number, seed: number): ChatCompletionRequest {
    const messages: ChatMessage[] = [{ role: 'system', content: `Système 🚀 \u001e ${'x'.repeat(300)}` }];
    for (let size = 0, turn = 0; size < totalBytes; turn++) {
      const content = `turn ${turn} ${seed} é ü 🚀 ${'word '.repeat(200 + (turn % 7))}`;
      messages.push({ role: turn % 2 ? 'assistant' : 'user', content });
      size += content.length;
    }
    messages.push({ role: 'user', content: `${'B'.repeat(140 * 1024)} end 🚀` });
    return { model: 'm', messages, max_tokens: 16 };
  }

  it('buildRoutingRequest hashes exactly what hashRoutingText does on renderRoutingText, whatever the cap', () => {
    for (const [kb, maxBlocks] of [
      [10, 2048],
      [200, 2048],
      [200, 300],
      [600, 2048],
      [600, 7],
    ] as const) {
      const body = longChat(kb * 1024, kb);
      const fromText = hashRoutingText(
        renderRoutingText(body, { maxUnits: routedTextUnits(maxBlocks, 256) }),
        256,
        maxBlocks,
      );
      const request = buildRoutingRequest(body, { blockSizeBytes: 256, maxBlocks });
      const { blockHashes, textBytes, contextBlocks, headHash, firstTurnBytes, boundaryBlocks } = request;
      expect({ blockHashes, textBytes, contextBlocks, headHash, firstTurnBytes, boundaryBlocks }).toEqual(fromText);
      expect(firstTurnBytes?.end).toBeGreaterThan(firstTurnBytes?.start ?? Infinity);
    }
  });

  it('keeps the hashes of earlier versions (replicas of two versions must agree during a rolling upgrade)', () => {
    // Figures computed by the single-string implementation this replaced (60c9993), on the same body.
    const request = buildRoutingRequest(longChat(200 * 1024, 200), { blockSizeBytes: 256 });
    expect([request.blockHashes.length, request.textBytes, request.contextBlocks, request.headHash]).toEqual([
      1378, 353_019, 818, 7_304_932_293_665_390,
    ]);
    expect(request.blockHashes.reduce((folded, hash) => (folded * 31 + hash) % 1e15, 0)).toBe(272_601_509_908_728);
  });
});
