import { InMemoryRoutingState, type RoutingStateStore } from '@kvroute/routing';
import { describe, expect, it } from 'vitest';
import { Lease } from './lease';

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

async function leaseOn(state: RoutingStateStore): Promise<Lease> {
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
  });
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
    async function deferredLease(
      state: RoutingStateStore,
      timers: ReturnType<typeof manualTimers>['timers'],
    ): Promise<Lease> {
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
        prefillDoneDelayMs: 20,
        timers,
      });
    }

    it('ends before the delay: prefill-done rides on the release (one call, which records the blocks), and the timer is gone', async () => {
      const { state, calls, store } = recordingStore();
      const clock = manualTimers();
      const lease = await deferredLease(state, clock.timers);
      calls.length = 0;
      lease.markPrefillDone();
      expect(calls).toEqual([]);
      lease.release();
      expect(clock.pending()).toBe(0);
      await Promise.resolve();
      expect(calls).toEqual(['release']);
      const after = await store.snapshot('m', ['a'], BLOCKS);
      expect([
        after.matchBlocks.get('a'),
        after.inflight.get('a') ?? 0,
        after.pendingPrefillTokens.get('a') ?? 0,
      ]).toEqual([3, 0, 0]);
    });

    it('outlives the delay: prefill-done is sent when it passes, and the release records nothing again', async () => {
      const { state, calls, store } = recordingStore();
      const clock = manualTimers();
      const lease = await deferredLease(state, clock.timers);
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
    async function estimatedLease(timers: ReturnType<typeof manualTimers>['timers'], state: RoutingStateStore) {
      await state.reserve('m', 'a', 'l1', [], 500);
      const lease = new Lease({
        state,
        pool: 'm',
        backendId: 'a',
        leaseId: 'l1',
        onError: (error) => {
          throw error;
        },
        blocksAtFirstOutput: BLOCKS,
        timers,
      });
      lease.clearBacklogAfter(300);
      return lease;
    }

    it('the estimate passes first: the backlog is cleared then, the prefix recorded by the release', async () => {
      const { state, calls, store } = recordingStore();
      const clock = manualTimers();
      const lease = await estimatedLease(clock.timers, state);
      calls.length = 0;
      expect((await store.snapshot('m', ['a'], BLOCKS)).pendingPrefillTokens.get('a')).toBe(500);
      clock.fire();
      const during = await store.snapshot('m', ['a'], BLOCKS);
      // Prefilled by the estimate, still running: out of the backlog, in flight, its prefix not claimed yet.
      expect([
        during.pendingPrefillTokens.get('a') ?? 0,
        during.inflight.get('a'),
        during.matchBlocks.get('a') ?? 0,
      ]).toEqual([0, 1, 0]);
      lease.markPrefillDone(true);
      lease.release();
      await Promise.resolve();
      expect(calls.filter((call) => call !== 'snapshot')).toEqual(['prefillDone', 'release']);
      const after = await store.snapshot('m', ['a'], BLOCKS);
      expect([
        after.matchBlocks.get('a'),
        after.inflight.get('a') ?? 0,
        after.pendingPrefillTokens.get('a') ?? 0,
      ]).toEqual([3, 0, 0]);
    });

    it('the response ends first: the estimate is dropped and the release does it all in one call', async () => {
      const { state, calls, store } = recordingStore();
      const clock = manualTimers();
      const lease = await estimatedLease(clock.timers, state);
      calls.length = 0;
      lease.markPrefillDone(true);
      expect(clock.pending()).toBe(0);
      lease.release();
      await Promise.resolve();
      expect(calls).toEqual(['release']);
      expect((await store.snapshot('m', ['a'], BLOCKS)).matchBlocks.get('a')).toBe(3);
    });

    it('released first (an error): the estimate is dropped, nothing recorded', async () => {
      const { state, calls, store } = recordingStore();
      const clock = manualTimers();
      const lease = await estimatedLease(clock.timers, state);
      calls.length = 0;
      lease.release();
      expect(clock.pending()).toBe(0);
      await Promise.resolve();
      expect(calls).toEqual(['release']);
      expect((await store.snapshot('m', ['a'], BLOCKS)).matchBlocks.get('a') ?? 0).toBe(0);
    });
  });
});
