import { describe, expect, it } from 'vitest';
import { settlesWithin } from './settles-within';

describe('settlesWithin', () => {
  it('is true for a promise that resolves or rejects in time, false for one that does not', async () => {
    expect(await settlesWithin(Promise.resolve(1), 50)).toBe(true);
    expect(await settlesWithin(Promise.reject(new Error('gone')), 50)).toBe(true);
    expect(await settlesWithin(new Promise(() => undefined), 20)).toBe(false);
    expect(await settlesWithin(new Promise((resolve) => setTimeout(resolve, 200)), 20)).toBe(false);
  });
});
