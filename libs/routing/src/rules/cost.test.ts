import { describe, expect, it } from 'vitest';
import { rankLine } from './cost';

/** Reads a rank line back as cost.lua does (its evaluateRule): the width digit, then 6 bits per character. */
function positionsOf(line: string): number[] {
  const width = line.charCodeAt(0) - 48;
  const positions: number[] = [];
  for (let at = 1; at + width <= line.length; at += width) {
    let position = 0;
    for (let k = at; k < at + width; k++) position = position * 64 + line.charCodeAt(k) - 48;
    positions.push(position);
  }
  return positions;
}

describe('the rank line (cost.lua reads it with one string.byte)', () => {
  it('gives each position as many characters as the pool needs, most significant first', () => {
    // Positions 1 and 63 of 63: one character each, '0' + position.
    expect(rankLine([0, 62], 63)).toBe('11o');
    // Positions 64 and 1 of 64: two characters each (64 = 1·64 + 0).
    expect(rankLine([63, 0], 64)).toBe('21001');
    // Positions 4096 and 4097 of 5,000: three characters each (4096 = 1·64²).
    expect(rankLine([4095, 4096], 5000)).toBe('3100101');
  });

  it('round-trips every position of pools at the width boundaries, in order', () => {
    for (const memberCount of [1, 16, 63, 64, 65, 1024, 4095, 4096, 4097, 300_000]) {
      const ranked = [memberCount - 1, 0, Math.floor(memberCount / 2), Math.max(0, memberCount - 2)];
      const line = rankLine(ranked, memberCount);
      expect(positionsOf(line)).toEqual(ranked.map((index) => index + 1));
      // Never a line's end, never outside ASCII (the argument travels as text).
      for (const char of line) expect(char.charCodeAt(0)).toBeGreaterThanOrEqual(48);
      for (const char of line) expect(char.charCodeAt(0)).toBeLessThanOrEqual(111);
    }
  });

  it('is the width digit alone for no ranked backend', () => {
    expect(rankLine([], 0)).toBe('1');
  });
});
