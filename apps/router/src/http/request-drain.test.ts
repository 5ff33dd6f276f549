import { EventEmitter } from 'node:events';
import type { ServerResponse } from 'node:http';
import { describe, expect, it } from 'vitest';
import { RequestDrain } from './request-drain';

/** The part of a ServerResponse RequestDrain touches. */
class FakeResponse extends EventEmitter {
  headersSent = false;
  destroyed = false;
  readonly headers = new Map<string, string>();
  setHeader(name: string, value: string): void {
    this.headers.set(name, value);
  }
  end(): void {
    this.emit('close');
  }
}

function track(drain: RequestDrain): FakeResponse {
  const response = new FakeResponse();
  drain.track(response as unknown as ServerResponse);
  return response;
}

describe('RequestDrain', () => {
  it('counts requests until their response closes', () => {
    const drain = new RequestDrain();
    const a = track(drain);
    track(drain);
    expect(drain.inflight).toBe(2);
    a.end();
    expect(drain.inflight).toBe(1);
  });

  it('marks Connection: close on responses not started when draining begins, and on every later request', () => {
    const drain = new RequestDrain();
    const streaming = track(drain);
    streaming.headersSent = true;
    const waiting = track(drain);
    expect(drain.isShuttingDown).toBe(false);
    drain.beginDraining();
    expect(drain.isShuttingDown).toBe(true);
    expect(drain.phase).toBe('draining');
    expect(waiting.headers.get('connection')).toBe('close');
    // Headers already sent cannot change.
    expect(streaming.headers.has('connection')).toBe(false);
    expect(track(drain).headers.get('connection')).toBe('close');
    drain.beginClosing();
    expect(drain.phase).toBe('closing');
    expect(track(drain).headers.get('connection')).toBe('close');
    drain.beginAborting();
    expect(drain.phase).toBe('aborting');
  });

  it('waits until no request is in flight, or gives up at the timeout', async () => {
    const drain = new RequestDrain();
    expect(await drain.waitUntilIdle(100)).toBe(true);
    const first = track(drain);
    setTimeout(() => first.end(), 40);
    const startedAt = performance.now();
    expect(await drain.waitUntilIdle(5_000)).toBe(true);
    expect(performance.now() - startedAt).toBeGreaterThanOrEqual(30);
    expect(drain.inflight).toBe(0);
    track(drain);
    expect(await drain.waitUntilIdle(50)).toBe(false);
  });
});
