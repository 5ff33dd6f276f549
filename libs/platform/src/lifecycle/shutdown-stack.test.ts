import { describe, expect, it, vi } from 'vitest';
import { ShutdownStack } from './shutdown-stack';

type LogMethod = (details: object, message: string) => void;

function fakeLogger() {
  return { info: vi.fn<LogMethod>(), warn: vi.fn<LogMethod>(), error: vi.fn<LogMethod>() };
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

describe('ShutdownStack', () => {
  it('closes in reverse order of push, awaiting each closer before the next', async () => {
    const stack = new ShutdownStack();
    const events: string[] = [];
    stack.push('redis', () => void events.push('redis'));
    stack.push('worker', async () => {
      events.push('worker:start');
      await sleep(10);
      events.push('worker:end');
    });
    stack.push('http', () => void events.push('http'));

    const result = await stack.closeAll({ deadlineMs: 1_000 });

    expect(events).toEqual(['http', 'worker:start', 'worker:end', 'redis']);
    expect(result).toMatchObject({
      ok: true,
      closed: ['http', 'worker', 'redis'],
      failed: [],
      timedOut: [],
      skipped: [],
    });
  });

  it('logs and collects a failing closer and still runs the rest', async () => {
    const stack = new ShutdownStack();
    const logger = fakeLogger();
    const closedRedis = vi.fn();
    const rejection = new Error('server close failed');
    stack.push('redis', closedRedis);
    stack.push('queue', () => {
      throw new Error('sync throw');
    });
    stack.push('http', () => Promise.reject(rejection));

    const result = await stack.closeAll({ deadlineMs: 1_000, logger });

    expect(closedRedis).toHaveBeenCalledOnce();
    expect(result.ok).toBe(false);
    expect(result.closed).toEqual(['redis']);
    expect(result.failed.map((failure) => failure.name)).toEqual(['http', 'queue']);
    expect(result.failed[0]?.error).toBe(rejection);
    expect(logger.error).toHaveBeenCalledWith(
      expect.objectContaining({ closer: 'http', err: rejection }),
      'closer failed',
    );
    expect(logger.info).toHaveBeenCalledWith(expect.objectContaining({ closer: 'redis' }), 'closed');
  });

  it('resolves at the deadline, reporting the running closer as timed out and the rest as skipped', async () => {
    const stack = new ShutdownStack();
    const logger = fakeLogger();
    const redis = vi.fn();
    stack.push('redis', redis);
    stack.push('worker', () => new Promise<void>(() => undefined));
    stack.push('http', () => undefined);

    const started = performance.now();
    const result = await stack.closeAll({ deadlineMs: 50, logger });
    const elapsed = performance.now() - started;

    expect(result).toMatchObject({ ok: false, closed: ['http'], timedOut: ['worker'], skipped: ['redis'] });
    expect(redis).not.toHaveBeenCalled();
    expect(elapsed).toBeGreaterThanOrEqual(45);
    expect(elapsed).toBeLessThan(1_000);
    expect(logger.warn).toHaveBeenCalledWith(
      expect.objectContaining({ closer: 'worker', deadlineMs: 50 }),
      expect.any(String),
    );
  });

  it('applies the deadline under fake timers too', async () => {
    vi.useFakeTimers();
    try {
      const stack = new ShutdownStack();
      stack.push('slow', () => new Promise<void>((resolve) => setTimeout(resolve, 10_000)));
      const pending = stack.closeAll({ deadlineMs: 5_000 });
      await vi.advanceTimersByTimeAsync(5_000);
      await expect(pending).resolves.toMatchObject({ timedOut: ['slow'], closed: [] });
    } finally {
      vi.useRealTimers();
    }
  });

  it('is idempotent: a second closeAll returns the same promise and runs nothing again', async () => {
    const stack = new ShutdownStack();
    const close = vi.fn();
    stack.push('http', close);

    const first = stack.closeAll({ deadlineMs: 1_000 });
    const second = stack.closeAll({ deadlineMs: 1 });

    expect(second).toBe(first);
    await first;
    expect(close).toHaveBeenCalledOnce();
  });

  it('refuses a push once closing has started', async () => {
    const stack = new ShutdownStack();
    await stack.closeAll({ deadlineMs: 100 });
    expect(() => stack.push('late', () => undefined)).toThrow(/after closeAll\(\) started/);
  });

  it('reports the close order before closing', () => {
    const stack = new ShutdownStack();
    stack.push('redis', () => undefined);
    stack.push('http', () => undefined);
    expect(stack.names).toEqual(['http', 'redis']);
  });
});
