import { describe, expect, it } from 'vitest';
import { AuthFailureLimiter } from './auth-failure-limiter';

describe('AuthFailureLimiter', () => {
  it('blocks a peer after maxFailures within the window, with the seconds left, and lets it go after', () => {
    let now = 1_000;
    const limiter = new AuthFailureLimiter({ maxFailures: 3, windowMs: 60_000, maxPeers: 10, nowMs: () => now });
    for (let attempt = 0; attempt < 3; attempt++) {
      expect(limiter.retryAfterSeconds('10.0.0.1')).toBeNull();
      limiter.recordFailure('10.0.0.1');
    }
    expect(limiter.retryAfterSeconds('10.0.0.1')).toBe(60);
    expect(limiter.retryAfterSeconds('10.0.0.2')).toBeNull();
    now += 59_500;
    expect(limiter.retryAfterSeconds('10.0.0.1')).toBe(1);
    now += 500;
    expect(limiter.retryAfterSeconds('10.0.0.1')).toBeNull();
  });

  it('tracks at most maxPeers peers, dropping the oldest', () => {
    const limiter = new AuthFailureLimiter({ maxFailures: 1, windowMs: 60_000, maxPeers: 100, nowMs: () => 0 });
    for (let peer = 0; peer < 1_000; peer++) limiter.recordFailure(`peer-${peer}`);
    expect(limiter.size).toBe(100);
    expect(limiter.retryAfterSeconds('peer-999')).toBe(60);
    expect(limiter.retryAfterSeconds('peer-0')).toBeNull();
  });
});
