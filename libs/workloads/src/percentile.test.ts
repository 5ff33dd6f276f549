import { describe, expect, it } from 'vitest';
import { mean, percentile } from './percentile';
import { syntheticTokenPrompt } from './synthetic-prompt';

describe('percentile', () => {
  it('uses the nearest rank', () => {
    const values = [15, 20, 35, 40, 50];
    expect(percentile(values, 5)).toBe(15);
    expect(percentile(values, 30)).toBe(20);
    expect(percentile(values, 50)).toBe(35);
    expect(percentile(values, 100)).toBe(50);
    expect(percentile([], 50)).toBeNaN();
    expect(mean([1, 2, 6])).toBe(3);
  });
});

describe('syntheticTokenPrompt', () => {
  it('is deterministic per seed and distinct across seeds', () => {
    expect(syntheticTokenPrompt(64, 3)).toEqual(syntheticTokenPrompt(64, 3));
    expect(syntheticTokenPrompt(64, 3)[0]).not.toBe(syntheticTokenPrompt(64, 4)[0]);
    expect(syntheticTokenPrompt(100, 1).every((token) => token >= 1000 && token < 91_000)).toBe(true);
  });
});
