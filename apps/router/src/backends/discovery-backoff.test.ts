import { describe, expect, it } from 'vitest';
import { discoveryRetryDelayMs } from './discovery-backoff';

describe('discoveryRetryDelayMs', () => {
  it('starts near 250 ms and doubles per failure, up to the cap', () => {
    const highest = () => 0.999_999;
    const caps = [1, 2, 3, 4, 5, 6, 50, 10_000].map((failures) => Math.round(discoveryRetryDelayMs(failures, highest)));
    expect(caps).toEqual([250, 500, 1000, 2000, 4000, 4000, 4000, 4000]);
  });

  it('never waits less than half the cap, whatever the random draw', () => {
    expect(discoveryRetryDelayMs(1, () => 0)).toBe(125);
    expect(discoveryRetryDelayMs(20, () => 0)).toBe(2000);
    expect(discoveryRetryDelayMs(3, () => 0.5)).toBe(750);
  });

  it('follows a custom backoff', () => {
    expect(discoveryRetryDelayMs(2, () => 0, { firstMs: 10, maxMs: 15 })).toBe(7.5);
  });
});
