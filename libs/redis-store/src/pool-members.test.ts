import { describe, expect, it } from 'vitest';
import { engineFiguresField, engineFiguresOfField } from './pool-members';

describe('engine figures as route.lua keeps them', () => {
  it('read back as written, 8 characters from 0 to o, across the range', () => {
    for (const waiting of [0, 1, 63, 64, 4_095, 262_143]) {
      for (const freeTokens of [-1, 0, 1, 5_000, 123_457, 1_073_741_822]) {
        const field = engineFiguresField({ waiting, freeTokens });
        expect(field).toMatch(/^[0-o]{8}$/);
        expect(engineFiguresOfField(field)).toEqual({ waiting, freeTokens });
      }
    }
  });

  it('clamp what does not fit (a queue past 262,143, a KV past a billion tokens) rather than wrap', () => {
    expect(engineFiguresOfField(engineFiguresField({ waiting: 10_000_000, freeTokens: 2 ** 40 }))).toEqual({
      waiting: 262_143,
      freeTokens: 1_073_741_822,
    });
    expect(engineFiguresOfField(engineFiguresField({ waiting: -3, freeTokens: -7 }))).toEqual({
      waiting: 0,
      freeTokens: -1,
    });
  });

  it("write a figure that is not a number (a scrape's NaN) as unknown", () => {
    expect(engineFiguresField({ waiting: Number.NaN, freeTokens: 5 })).toBe('00000000');
    expect(engineFiguresField({ waiting: 2, freeTokens: Number.POSITIVE_INFINITY })).toBe('00000000');
  });

  it("read '' as unknown and anything else malformed as null", () => {
    expect(engineFiguresOfField('')).toEqual({ waiting: 0, freeTokens: -1 });
    for (const bad of ['0 0', '0000000', '000000000', '0000000p', '0000000/']) {
      expect(engineFiguresOfField(bad), bad).toBeNull();
    }
  });
});
