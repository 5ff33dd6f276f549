import { encode } from 'gpt-tokenizer/encoding/cl100k_base';
import { describe, expect, it } from 'vitest';
import { ONE_TOKEN_WORDS } from './one-token-words';
import { mixSeed, wordBytes, wordText } from './text';

// The sim's tokenizer (apps/vllm-sim/src/text/tokenizer.ts): cl100k_base, user text as plain text.
const tokenCount = (text: string): number => encode(text, { disallowedSpecial: new Set<string>() }).length;

describe('wordText', () => {
  it('uses only words that are one token with their leading space, all distinct', () => {
    expect(ONE_TOKEN_WORDS.length).toBeGreaterThan(2000);
    expect(new Set(ONE_TOKEN_WORDS).size).toBe(ONE_TOKEN_WORDS.length);
    for (const word of ONE_TOKEN_WORDS) {
      expect(word).toMatch(/^[a-z]{3}$/);
      expect(tokenCount(` ${word}`), word).toBe(1);
    }
  });

  it('makes n tokens of text in the sim tokenizer, 4 bytes each, also when texts are joined', () => {
    for (const tokens of [1, 16, 512, 4096]) {
      const text = wordText(tokens, mixSeed(7, tokens));
      expect(text).toHaveLength(4 * tokens);
      expect(tokenCount(text)).toBe(tokens);
    }
    // Mooncake prompts are blocks of 512 joined: the count adds up.
    const blocks = [1, 2, 3, 4].map((id) => wordText(512, mixSeed(1, 20, id)));
    expect(tokenCount(blocks.join(''))).toBe(4 * 512);
    expect(tokenCount(`system: hello${wordText(100, 3)}`)).toBe(tokenCount('system: hello') + 100);
  });

  it('is a prefix of itself with more tokens, and differs between seeds', () => {
    expect(wordText(300, 11).startsWith(wordText(200, 11))).toBe(true);
    expect(wordText(50, 11)).not.toBe(wordText(50, 12));
    expect(wordBytes(10, 5)).toBe(wordText(3, 5).slice(0, 10));
  });
});
