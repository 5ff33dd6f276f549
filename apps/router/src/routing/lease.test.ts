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
  return new Lease({ state, pool: 'm', backendId: 'a', leaseId: 'l1', onError: (error) => { throw error; }, blocksAtFirstOutput: BLOCKS });
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

  it('a response that never had a first output (an error) releases without recording', async () => {
    const { state, store } = recordingStore();
    const lease = await leaseOn(state);
    lease.release();
    lease.markPrefillDone(true);
    await Promise.resolve();
    expect((await store.snapshot('m', ['a'], BLOCKS)).matchBlocks.get('a') ?? 0).toBe(0);
  });
});
