import { InMemoryRoutingState, type RoutingStateStore } from '@kvroute/routing';
import { describe, expect, it } from 'vitest';
import { Lease, type LeaseOptions } from './lease';

const BLOCKS = [11, 12, 13];

/** A real in-memory store, with the calls the lease makes on it written down. */
function recordingStore(): { state: RoutingStateStore; calls: string[]; store: InMemoryRoutingState } {
  const store = new InMemoryRoutingState({ maxBlocksPerBackend: 1000, blockIdleTtlMs: 0, nowMs: () => 1_000 });
  const calls: string[] = [];
  const state = new Proxy(store, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver) as unknown;
      if (typeof value !== 'function') return value;
      return (...args: unknown[]) => {
        calls.push(String(name));
        return (value as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  });
  return { state, calls, store };
}

/** A lease on backend 'a' whose request brought 500 prefill tokens; `options`: the lease options a case adds. */
async function leaseOn(state: RoutingStateStore, options: Partial<LeaseOptions> = {}): Promise<Lease> {
  await state.reserve('m', 'a', 'l1', [], 500);
  return new Lease({
    state,
    pool: 'm',
    backendId: 'a',
    leaseId: 'l1',
    onError: (error) => {
      throw error;
    },
    blocksAtFirstOutput: BLOCKS,
    ...options,
  });
}

/** The final figures of backend 'a': matched blocks, in flight, pending prefill tokens. */
async function figuresOfA(store: InMemoryRoutingState): Promise<number[]> {
  const after = await store.snapshot('m', ['a'], BLOCKS);
  return [after.matchBlocks.get('a') ?? 0, after.inflight.get('a') ?? 0, after.pendingPrefillTokens.get('a') ?? 0];
}

/** Timers the test fires by hand. */
function manualTimers(): {
  timers: { set: (callback: () => void) => number; clear: (handle: unknown) => void };
  fire: () => void;
  pending: () => number;
} {
  const waiting = new Map<number, () => void>();
  let next = 0;
  return {
    timers: {
      set: (callback) => (waiting.set(++next, callback), next),
      clear: (handle) => waiting.delete(handle as number),
    },
    fire: () => {
      for (const [handle, callback] of [...waiting]) {
        waiting.delete(handle);
        callback();
      }
    },
    pending: () => waiting.size,
  };
}

describe('Lease', () => {
  it('a stream: prefill-done at the first output, then a plain release (two calls)', async () => {
    const { state, calls, store } = recordingStore();
    const lease = await leaseOn(state);
    calls.length = 0;
    lease.markPrefillDone();
    expect((await store.snapshot('m', ['a'], BLOCKS)).matchBlocks.get('a')).toBe(3);
    lease.release();
    lease.release();
    expect(calls).toEqual(['prefillDone', 'release']);
  });

  it('a non-streaming response: the first output rides on the release (one call), which records the blocks', async () => {
    const { state, calls, store } = recordingStore();
    const lease = await leaseOn(state);
    calls.length = 0;
    lease.markPrefillDone(true);
    expect(calls).toEqual([]);
    // Until the release the lease still counts its prefill tokens, and nothing is recorded yet.
    expect((await store.snapshot('m', ['a'], BLOCKS)).pendingPrefillTokens.get('a')).toBe(500);
    lease.release();
    await Promise.resolve();
    expect(calls).toEqual(['release']);
    const after = await store.snapshot('m', ['a'], BLOCKS);
    expect([after.matchBlocks.get('a'), after.inflight.get('a') ?? 0]).toEqual([3, 0]);
  });

  describe('a stream with prefillDoneDelayMs', () => {
    it('ends before the delay: prefill-done rides on the release (one call, which records the blocks), and the timer is gone', async () => {
      const { state, calls, store } = recordingStore();
      const clock = manualTimers();
      const lease = await leaseOn(state, { prefillDoneDelayMs: 20, timers: clock.timers });
      calls.length = 0;
      lease.markPrefillDone();
      expect(calls).toEqual([]);
      lease.release();
      expect(clock.pending()).toBe(0);
      await Promise.resolve();
      expect(calls).toEqual(['release']);
      expect(await figuresOfA(store)).toEqual([3, 0, 0]);
    });

    it('outlives the delay: prefill-done is sent when it passes, and the release records nothing again', async () => {
      const { state, calls, store } = recordingStore();
      const clock = manualTimers();
      const lease = await leaseOn(state, { prefillDoneDelayMs: 20, timers: clock.timers });
      calls.length = 0;
      lease.markPrefillDone();
      expect((await store.snapshot('m', ['a'], BLOCKS)).pendingPrefillTokens.get('a')).toBe(500);
      clock.fire();
      expect((await store.snapshot('m', ['a'], BLOCKS)).pendingPrefillTokens.get('a') ?? 0).toBe(0);
      lease.release();
      expect(calls.filter((call) => call !== 'snapshot')).toEqual(['prefillDone', 'release']);
    });
  });

  it('a response that never had a first output (an error) releases without recording', async () => {
    const { state, store } = recordingStore();
    const lease = await leaseOn(state);
    lease.release();
    lease.markPrefillDone(true);
    await Promise.resolve();
    expect((await store.snapshot('m', ['a'], BLOCKS)).matchBlocks.get('a') ?? 0).toBe(0);
  });

  describe('a non-streaming request with clearBacklogAfter (its prefill leaves the backlog at an estimate)', () => {
    /** A lease whose prefill ends, by the estimate, 300 ms after it was taken; no call recorded yet. */
    async function estimatedLease() {
      const { state, calls, store } = recordingStore();
      const clock = manualTimers();
      const lease = await leaseOn(state, { timers: clock.timers });
      lease.clearBacklogAfter(300);
      calls.length = 0;
      return { calls, store, clock, lease };
    }

    it('the estimate passes first: the backlog is cleared then, the prefix recorded by the release', async () => {
      const { calls, store, clock, lease } = await estimatedLease();
      expect((await store.snapshot('m', ['a'], BLOCKS)).pendingPrefillTokens.get('a')).toBe(500);
      clock.fire();
      // Prefilled by the estimate, still running: its prefix not claimed yet, in flight, out of the backlog.
      expect(await figuresOfA(store)).toEqual([0, 1, 0]);
      lease.markPrefillDone(true);
      lease.release();
      await Promise.resolve();
      expect(calls.filter((call) => call !== 'snapshot')).toEqual(['clearBacklog', 'release']);
      expect(await figuresOfA(store)).toEqual([3, 0, 0]);
    });

    it('the response ends first: the estimate is dropped and the release does it all in one call', async () => {
      const { calls, store, clock, lease } = await estimatedLease();
      lease.markPrefillDone(true);
      expect(clock.pending()).toBe(0);
      lease.release();
      await Promise.resolve();
      expect(calls).toEqual(['release']);
      expect((await store.snapshot('m', ['a'], BLOCKS)).matchBlocks.get('a')).toBe(3);
    });

    it('released first (an error): the estimate is dropped, nothing recorded', async () => {
      const { calls, store, clock, lease } = await estimatedLease();
      lease.release();
      expect(clock.pending()).toBe(0);
      await Promise.resolve();
      expect(calls).toEqual(['release']);
      expect((await store.snapshot('m', ['a'], BLOCKS)).matchBlocks.get('a') ?? 0).toBe(0);
    });
  });
});
