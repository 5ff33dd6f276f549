import { describe, expect, it } from 'vitest';
import { CircuitBreaker } from './circuit-breaker';

function createBreaker() {
  let now = 0;
  const breaker = new CircuitBreaker({ failureThreshold: 3, cooldownMs: 1000, nowMs: () => now });
  return { breaker, advance: (ms: number) => (now += ms) };
}

describe('CircuitBreaker', () => {
  it('opens after consecutive failures only', () => {
    const { breaker } = createBreaker();
    breaker.onFailure();
    breaker.onFailure();
    breaker.onSuccess();
    breaker.onFailure();
    breaker.onFailure();
    expect(breaker.state).toBe('closed');
    breaker.onFailure();
    expect(breaker.state).toBe('open');
    expect(breaker.isAvailable()).toBe(false);
  });

  it('lets one probe through after the cooldown; success closes, failure reopens', () => {
    const { breaker, advance } = createBreaker();
    for (let i = 0; i < 3; i++) breaker.onFailure();
    advance(1000);
    expect(breaker.state).toBe('half-open');
    expect(breaker.isAvailable()).toBe(true);
    breaker.onAttempt();
    expect(breaker.isAvailable()).toBe(false);
    breaker.onFailure();
    expect(breaker.state).toBe('open');
    advance(1000);
    breaker.onAttempt();
    breaker.onSuccess();
    expect(breaker.state).toBe('closed');
    expect(breaker.isAvailable()).toBe(true);
  });

  it('a probe abandoned without a verdict (its client left) frees the probe slot for the next request', () => {
    const { breaker, advance } = createBreaker();
    for (let i = 0; i < 3; i++) breaker.onFailure();
    advance(1000);
    breaker.onAttempt();
    expect(breaker.isAvailable()).toBe(false);
    breaker.onAbandoned();
    expect(breaker.state).toBe('half-open');
    expect(breaker.isAvailable()).toBe(true);
  });
});
