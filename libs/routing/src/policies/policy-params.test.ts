import { describe, expect, it } from 'vitest';
import { checkParam, defaultsOf, describeRange, resolveParams, type ParamTable } from './policy-params';

const TABLE = {
  weight: { default: 2, min: 0, exclusiveMin: true, unit: '', doc: 'a weight' },
  slots: { default: 8, min: 1, max: 64, integer: true, unit: 'requests', doc: 'slots', configKey: 'toySlots' },
  mode: { default: 'fast', values: ['fast', 'careful'], doc: 'how' },
} as const satisfies ParamTable;

describe('parameter tables', () => {
  it('give the defaults', () => {
    expect(defaultsOf(TABLE)).toEqual({ weight: 2, slots: 8, mode: 'fast' });
  });

  it('overlay defined values on the defaults; an explicit undefined keeps the default', () => {
    expect(resolveParams(TABLE, { slots: 3, weight: undefined })).toEqual({ weight: 2, slots: 3, mode: 'fast' });
    expect(resolveParams(TABLE, { mode: 'careful' }).mode).toBe('careful');
  });

  it.each<[string, Record<string, unknown>, RegExp]>([
    ['an exclusive minimum', { weight: 0 }, /weight must be a number > 0, got 0/],
    ['an integer', { slots: 2.5 }, /slots must be an integer in \[1, 64\], got 2.5/],
    ['a maximum', { slots: 65 }, /slots/],
    ['a finite number', { weight: Number.POSITIVE_INFINITY }, /weight/],
    ['a choice', { mode: 'slow' }, /mode must be one of fast, careful, got slow/],
    ['a known name', { wieght: 1 }, /unknown parameter wieght/],
  ])('check %s', (_label, overrides, message) => {
    expect(() => resolveParams(TABLE, overrides)).toThrow(message);
  });

  it('describe ranges in words', () => {
    expect(describeRange(TABLE.slots)).toBe('an integer in [1, 64]');
    expect(describeRange({ default: 0, min: 0, unit: '', doc: '' })).toBe('a number ≥ 0');
    expect(() => checkParam('x', { default: 0, min: 0, unit: '', doc: '' }, '1')).toThrow(RangeError);
  });
});
