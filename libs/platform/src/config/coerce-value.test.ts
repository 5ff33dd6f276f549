import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { coerceValue } from './coerce-value';
import { describeField } from './field-shape';

describe('coerceValue', () => {
  it('converts numbers and leaves non-numbers for zod to reject', () => {
    const shape = describeField(z.number().default(1));
    expect(coerceValue(' 42 ', shape)).toBe(42);
    expect(coerceValue('-0.5', shape)).toBe(-0.5);
    expect(coerceValue('forty', shape)).toBe('forty');
  });

  it('accepts the usual boolean spellings, case-insensitively', () => {
    const shape = describeField(z.boolean());
    expect(['true', 'YES', 'on', '1'].map((raw) => coerceValue(raw, shape))).toEqual([true, true, true, true]);
    expect(['false', 'No', 'off', '0'].map((raw) => coerceValue(raw, shape))).toEqual([false, false, false, false]);
    expect(coerceValue('maybe', shape)).toBe('maybe');
  });

  it('matches enum and numeric literal members by their string form', () => {
    expect(coerceValue('cacheaware', describeField(z.enum(['roundrobin', 'cacheaware'])))).toBe('cacheaware');
    expect(coerceValue('2', describeField(z.union([z.literal(1), z.literal(2)])))).toBe(2);
  });

  it('splits comma-separated lists and coerces each element', () => {
    expect(coerceValue('1, 2,,3', describeField(z.array(z.number())))).toEqual([1, 2, 3]);
    expect(coerceValue('', describeField(z.array(z.string())))).toEqual([]);
  });

  it('passes strings through untouched', () => {
    expect(coerceValue(' padded ', describeField(z.string().optional()))).toBe(' padded ');
  });
});
