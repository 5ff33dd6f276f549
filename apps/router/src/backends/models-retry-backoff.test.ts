import { describe, expect, it } from 'vitest';
import { modelsRetryDelayMs } from './models-retry-backoff';

describe('modelsRetryDelayMs', () => {
  it('starts near 250 ms and doubles per failure, up to the cap', () => {
    const highest = () => 0.999_999;
    const caps = [1, 2, 3, 4, 5, 6, 50, 10_000].map((failures) => Math.round(modelsRetryDelayMs(failures, highest)));
    expect(caps).toEqual([250, 500, 1000, 2000, 4000, 4000, 4000, 4000]);
  });

  it('never waits less than half the cap, whatever the random draw', () => {
    expect(modelsRetryDelayMs(1, () => 0)).toBe(125);
    expect(modelsRetryDelayMs(20, () => 0)).toBe(2000);
    expect(modelsRetryDelayMs(3, () => 0.5)).toBe(750);
  });

  it('follows a custom backoff', () => {
    expect(modelsRetryDelayMs(2, () => 0, { firstMs: 10, maxMs: 15 })).toBe(7.5);
  });
});
