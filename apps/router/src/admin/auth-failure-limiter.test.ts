import { describe, expect, it } from 'vitest';
import { AuthFailureLimiter, limitedPeerOf } from './auth-failure-limiter';

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

  it('makes room by dropping peers not blocked yet before any blocked one', () => {
    const limiter = new AuthFailureLimiter({ maxFailures: 2, windowMs: 60_000, maxPeers: 10, nowMs: () => 0 });
    limiter.recordFailure('attacker');
    limiter.recordFailure('attacker');
    for (let peer = 0; peer < 1_000; peer++) limiter.recordFailure(`other-${peer}`);
    expect(limiter.size).toBe(10);
    expect(limiter.retryAfterSeconds('attacker')).toBe(60);
  });

  it('limits an IPv6 host by its /64, and an IPv4-mapped address as IPv4', () => {
    expect(limitedPeerOf('2001:db8:1:2:aaaa::1')).toBe('2001:db8:1:2::/64');
    expect(limitedPeerOf('2001:0db8:0001:0002:ffff:ffff:ffff:ffff')).toBe('2001:db8:1:2::/64');
    expect(limitedPeerOf('2001:db8::7')).toBe('2001:db8:0:0::/64');
    expect(limitedPeerOf('::1')).toBe('0:0:0:0::/64');
    expect(limitedPeerOf('::ffff:10.1.2.3')).toBe('10.1.2.3');
    expect(limitedPeerOf('10.1.2.3')).toBe('10.1.2.3');
  });

  it('tracks at most maxPeers peers, dropping the oldest', () => {
    const limiter = new AuthFailureLimiter({ maxFailures: 1, windowMs: 60_000, maxPeers: 100, nowMs: () => 0 });
    for (let peer = 0; peer < 1_000; peer++) limiter.recordFailure(`peer-${peer}`);
    expect(limiter.size).toBe(100);
    expect(limiter.retryAfterSeconds('peer-999')).toBe(60);
    expect(limiter.retryAfterSeconds('peer-0')).toBeNull();
  });
});
