import { describe, expect, it } from 'vitest';
import { seededRandom } from '@kvroute/workloads';
import { measureJsonNesting } from './json-nesting';

/** Reference depth: parse, then walk (recursion is fine for the small values used here). */
function parsedDepth(value: unknown): number {
  if (value === null || typeof value !== 'object') return 0;
  const children = Array.isArray(value) ? value : Object.values(value);
  return 1 + children.reduce<number>((deepest, child) => Math.max(deepest, parsedDepth(child)), 0);
}

/** Deterministic pseudo-random JSON values (mulberry32), with strings full of brackets, quotes and backslashes. */
function randomJson(seed: number): unknown {
  const random = seededRandom(seed);
  const alphabet = ['a', '[', ']', '{', '}', '"', '\\', '\\"', 'é', '✨', '😀', '\n', ':', ','];
  const text = (): string =>
    Array.from({ length: Math.floor(random() * 8) }, () => alphabet[Math.floor(random() * alphabet.length)]).join('');
  const value = (depth: number): unknown => {
    const pick = random();
    if (depth > 6 || pick < 0.3) return [text(), 1.5, true, null][Math.floor(random() * 4)];
    const size = Math.floor(random() * 4);
    if (pick < 0.65) return Array.from({ length: size }, () => value(depth + 1));
    return Object.fromEntries(Array.from({ length: size }, () => [text(), value(depth + 1)]));
  };
  return value(0);
}

describe('measureJsonNesting', () => {
  it.each([
    ['1', 0],
    ['"[{["', 0],
    ['{}', 1],
    ['[]', 1],
    ['{"a":[1]}', 2],
    ['[[], [[]], {}]', 3],
    ['{"a":"]]]]","b":["\\"[["]}', 2],
    ['["\\\\", [1]]', 2],
    ['["\\\\\\"]", [1]]', 2],
    ['{"✨😀":{"é":["]"]}}', 3],
  ])('measures %s as depth %i', (json, depth) => {
    expect(measureJsonNesting(json, 64)).toEqual({ tooDeep: false, depth });
    expect(measureJsonNesting(Buffer.from(json), 64)).toEqual({ tooDeep: false, depth });
  });

  it('agrees with the parsed depth on 500 random documents, strings full of brackets and escapes', () => {
    for (let seed = 1; seed <= 500; seed++) {
      const value = randomJson(seed);
      const json = JSON.stringify(value);
      expect(measureJsonNesting(Buffer.from(json), 64), json).toEqual({ tooDeep: false, depth: parsedDepth(value) });
    }
  });

  it('reads escapes across the end of the short-string scan', () => {
    for (let length = 10; length <= 24; length++) {
      for (const escape of ['\\"', '\\\\', '\\\\\\"']) {
        const json = `["${'a'.repeat(length)}${escape}[[{", [1]]`;
        expect(measureJsonNesting(json, 64), json).toEqual({ tooDeep: false, depth: parsedDepth(JSON.parse(json)) });
      }
    }
  });

  it('accepts exactly maxDepth and stops at the first bracket beyond it', () => {
    expect(measureJsonNesting('[[]]', 2)).toEqual({ tooDeep: false, depth: 2 });
    expect(measureJsonNesting('[{"a":[]}]', 2)).toEqual({ tooDeep: true, depth: 3, offset: 6 });
    expect(measureJsonNesting('[]', 0)).toEqual({ tooDeep: true, depth: 1, offset: 0 });
    expect(measureJsonNesting('"x"', 0)).toEqual({ tooDeep: false, depth: 0 });
  });

  it('refuses a 20,000-deep body at depth maxDepth + 1, at its byte offset', () => {
    const deep = Buffer.from(`{"model":"m","tools":${'['.repeat(20_000)}${']'.repeat(20_000)}}`);
    expect(measureJsonNesting(deep, 64)).toEqual({
      tooDeep: true,
      depth: 65,
      offset: '{"model":"m","tools":'.length + 63,
    });
  });

  it('reports offsets of a string argument in its UTF-8 encoding', () => {
    expect(measureJsonNesting('{"é":[[', 2)).toEqual({ tooDeep: true, depth: 3, offset: Buffer.byteLength('{"é":[') });
  });

  it('does not count brackets inside an unterminated string, and never throws on malformed input', () => {
    expect(measureJsonNesting('["abc[[[[', 1)).toEqual({ tooDeep: false, depth: 1 });
    expect(measureJsonNesting(']]]}}', 1)).toEqual({ tooDeep: false, depth: 0 });
    expect(measureJsonNesting('', 1)).toEqual({ tooDeep: false, depth: 0 });
    expect(measureJsonNesting('"\\', 1)).toEqual({ tooDeep: false, depth: 0 });
  });

  it('rejects a maxDepth that is not a non-negative integer', () => {
    expect(() => measureJsonNesting('[]', -1)).toThrow(RangeError);
    expect(() => measureJsonNesting('[]', 1.5)).toThrow(RangeError);
  });
});
