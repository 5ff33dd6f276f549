import { describe, expect, it } from 'vitest';
import { createCacheAwarePolicy } from '../policies/cache-aware';
import { createPrefixAwarePolicy } from '../policies/prefix-aware';
import { decide } from './decide';
import type { DecideInput } from './routing-state';
import { InMemoryRoutingState } from './in-memory-routing-state';

function createState(options: Partial<{ maxBlocksPerBackend: number; blockIdleTtlMs: number }> = {}) {
  let now = 1_000;
  const state = new InMemoryRoutingState({
    maxBlocksPerBackend: options.maxBlocksPerBackend ?? 1000,
    blockIdleTtlMs: options.blockIdleTtlMs ?? 0,
    nowMs: () => now,
  });
  return { state, advance: (ms: number) => (now += ms) };
}

describe('InMemoryRoutingState', () => {
  it('matches the longest recorded prefix per backend and stops at the first miss', async () => {
    const { state } = createState();
    await state.reserve('m', 'a', 'lease-1', [1, 2, 3, 4], 0);
    await state.reserve('m', 'b', 'lease-2', [1, 2], 0);
    const snapshot = await state.snapshot('m', ['a', 'b', 'c'], [1, 2, 3, 9, 4]);
    expect(snapshot.matchBlocks.get('a')).toBe(3);
    expect(snapshot.matchBlocks.get('b')).toBe(2);
    expect(snapshot.matchBlocks.get('c')).toBeUndefined();
    expect(snapshot.inflight.get('a')).toBe(1);
    expect(snapshot.inflight.get('c')).toBe(0);
  });

  it("answers when each backend's deepest matched block was recorded (the learn stage's eviction evidence)", async () => {
    const { state, advance } = createState();
    await state.reserve('m', 'a', 'l1', [1, 2, 3, 4], 0); // at 1000
    advance(3_000);
    await state.reserve('m', 'b', 'l2', [1, 2], 0); // at 4000
    advance(2_000);
    await state.reserve('m', 'a', 'l3', [1, 2], 0); // at 6000: a's blocks 1 and 2 refreshed, 3 and 4 not
    const snapshot = await state.snapshot('m', ['a', 'b', 'c'], [1, 2, 3, 9]);
    expect(Object.fromEntries(snapshot.matchRecordedAtMs ?? [])).toEqual({ a: 1_000, b: 4_000 });
  });

  it('never records a block newer than the block before it, so ageing hides only the tail of a chain', async () => {
    const { state, advance } = createState();
    await state.reserve('m', 'a', 'l1', [1, 2], 0); // at 1000
    advance(500);
    await state.reserve('m', 'a', 'l2', [1, 2, 3], 0); // 1 and 2 kept (within the refresh granularity): 3 gets their time
    expect((await state.snapshot('m', ['a'], [1, 2, 3])).matchRecordedAtMs?.get('a')).toBe(1_000);
    advance(1_000);
    await state.reserve('m', 'a', 'l3', [1, 2, 3, 4], 0); // all stale: the whole chain at 2500
    expect((await state.snapshot('m', ['a'], [1, 2, 3, 4])).matchRecordedAtMs?.get('a')).toBe(2_500);
  });

  it('records ownership at the first token for policies that ask, at routing for the others', async () => {
    const { state } = createState();
    const inputOf = (policy: DecideInput['policy'], leaseId: string): DecideInput => ({
      pool: 'm',
      request: {
        model: 'm',
        blockHashes: [1, 2, 3],
        blockSizeBytes: 256,
        textBytes: 800,
        contextBlocks: 0,
        headHash: 1,
        sessionKey: null,
      },
      backends: [
        { id: 'a', weight: 1 },
        { id: 'b', weight: 1 },
      ],
      policy,
      context: { nowMs: 0, random: () => 0 },
      leaseId,
    });
    const depthOf = async (id: string): Promise<number> =>
      (await state.snapshot('m', [id], [1, 2, 3])).matchBlocks.get(id) ?? 0;
    const first = await decide(state, inputOf(createCacheAwarePolicy(), 'l1'));
    const chosen = first.decision.kind === 'routed' ? first.decision.backendId : '';
    expect(await depthOf(chosen)).toBe(0);
    const sibling = await decide(state, inputOf(createCacheAwarePolicy(), 'l2'));
    expect(sibling.decision.kind === 'routed' && sibling.decision.backendId).not.toBe(chosen);
    await state.prefillDone('m', chosen, 'l1', [1, 2, 3]);
    expect(await depthOf(chosen)).toBe(3);
    expect((await state.snapshot('m', [chosen], [])).pendingPrefillTokens.get(chosen)).toBe(0);

    // The seed's prefixaware, on a state that holds nothing yet: recorded as soon as it is routed.
    const fresh = createState().state;
    const seed = await decide(fresh, inputOf(createPrefixAwarePolicy(), 'l3'));
    const seedChosen = seed.decision.kind === 'routed' ? seed.decision.backendId : '';
    expect((await fresh.snapshot('m', [seedChosen], [1, 2, 3])).matchBlocks.get(seedChosen)).toBe(3);
  });

  it('keeps pools apart', async () => {
    const { state } = createState();
    await state.reserve('model-x', 'a', 'l', [1, 2], 0);
    expect((await state.snapshot('model-y', ['a'], [1, 2])).matchBlocks.get('a')).toBeUndefined();
  });

  it('counts the prefill backlog until the first token, and forgets it on release', async () => {
    const { state } = createState();
    await state.reserve('m', 'a', 'l1', [], 5000);
    await state.reserve('m', 'a', 'l2', [], 300);
    expect((await state.snapshot('m', ['a'], [])).pendingPrefillTokens.get('a')).toBe(5300);
    await state.prefillDone('m', 'a', 'l1');
    await state.prefillDone('m', 'a', 'l1');
    expect((await state.snapshot('m', ['a'], [])).pendingPrefillTokens.get('a')).toBe(300);
    await state.release('m', 'a', 'l2');
    const snapshot = await state.snapshot('m', ['a'], []);
    expect(snapshot.pendingPrefillTokens.get('a')).toBe(0);
    expect(snapshot.inflight.get('a')).toBe(1);
  });

  it("clears a lease's backlog at once (clearBacklog), in flight still, its prefix not recorded", async () => {
    const { state } = createState();
    await state.reserve('m', 'a', 'l1', [], 700);
    await state.clearBacklog('m', 'a', 'l1');
    await state.clearBacklog('m', 'a', 'gone');
    const snapshot = await state.snapshot('m', ['a'], [1]);
    expect(snapshot.pendingPrefillTokens.get('a')).toBe(0);
    expect(snapshot.inflight.get('a')).toBe(1);
    expect(snapshot.matchBlocks.get('a') ?? 0).toBe(0);
  });

  it('keeps the backlog sum exact when a lease id is reserved again', async () => {
    const { state } = createState();
    await state.reserve('m', 'a', 'l1', [], 100);
    await state.reserve('m', 'a', 'l1', [], 40);
    expect((await state.snapshot('m', ['a'], [])).pendingPrefillTokens.get('a')).toBe(40);
    await state.release('m', 'a', 'l1');
    await state.release('m', 'a', 'l1');
    expect((await state.snapshot('m', ['a'], [])).pendingPrefillTokens.get('a')).toBe(0);
  });

  it('releases each lease once, idempotently', async () => {
    const { state } = createState();
    await state.reserve('m', 'a', 'l1', [], 0);
    await state.reserve('m', 'a', 'l2', [], 0);
    await state.release('m', 'a', 'l1');
    await state.release('m', 'a', 'l1');
    await state.release('m', 'a', 'never-taken');
    expect(state.inflightCounts().get('a')).toBe(1);
  });

  it('refuses a lease at maxInflight without recording anything, and takes it again once one is released', async () => {
    const { state } = createState();
    expect(await state.reserve('m', 'a', 'l1', [1], 0, 2)).toBe(true);
    expect(await state.reserve('m', 'a', 'l2', [1], 0, 2)).toBe(true);
    expect(await state.reserve('m', 'a', 'l3', [1, 2, 3], 700, 2)).toBe(false);
    const snapshot = await state.snapshot('m', ['a'], [1, 2, 3]);
    expect(snapshot.inflight.get('a')).toBe(2);
    expect(snapshot.matchBlocks.get('a')).toBe(1);
    expect(snapshot.pendingPrefillTokens.get('a')).toBe(0);
    await state.release('m', 'a', 'l1');
    expect(await state.reserve('m', 'a', 'l3', [1, 2, 3], 700, 2)).toBe(true);
    expect(await state.reserve('m', 'a', 'l4', [], 0)).toBe(true); // no limit given: never refused
    expect(state.inflightCounts().get('a')).toBe(3);
  });

  it('renews only a lease that exists', async () => {
    const { state } = createState();
    await state.reserve('m', 'a', 'l1', [], 0);
    expect(await state.renew('m', 'a', 'l1')).toBe(true);
    await state.release('m', 'a', 'l1');
    expect(await state.renew('m', 'a', 'l1')).toBe(false);
    expect(await state.renew('m', 'b', 'never-taken')).toBe(false);
  });

  it('evicts the least recently recorded blocks over the cap', async () => {
    const { state, advance } = createState({ maxBlocksPerBackend: 4 });
    await state.reserve('m', 'a', 'l1', [1, 2], 0);
    advance(2000);
    await state.reserve('m', 'a', 'l2', [10, 11], 0);
    advance(2000);
    await state.reserve('m', 'a', 'l3', [1, 2], 0); // refreshes 1, 2
    advance(2000);
    await state.reserve('m', 'a', 'l4', [20], 0); // evicts 11, the tail of the least recent chain
    expect(state.blockCount('m', 'a')).toBe(4);
    expect((await state.snapshot('m', ['a'], [10, 11])).matchBlocks.get('a')).toBe(1);
    expect((await state.snapshot('m', ['a'], [1, 2])).matchBlocks.get('a')).toBe(2);
  });

  it('evicts a chain from its tail, so the shallow blocks still match', async () => {
    const { state, advance } = createState({ maxBlocksPerBackend: 5 });
    await state.reserve('m', 'a', 'l1', [1, 2, 3, 4], 0);
    advance(2000);
    await state.reserve('m', 'a', 'l2', [7, 8], 0); // over the cap by one: block 4 (the tail) goes
    const snapshot = await state.snapshot('m', ['a'], [1, 2, 3, 4]);
    expect(snapshot.matchBlocks.get('a')).toBe(3);
  });

  it('does not reorder blocks re-recorded within the refresh granularity', async () => {
    const { state, advance } = createState({ maxBlocksPerBackend: 3 });
    await state.reserve('m', 'a', 'l1', [1, 2], 0);
    advance(100);
    await state.reserve('m', 'a', 'l2', [9], 0);
    await state.reserve('m', 'a', 'l3', [1, 2], 0); // within 1 s: 1 and 2 stay older than 9
    advance(100);
    await state.reserve('m', 'a', 'l4', [5], 0); // evicts 2 (oldest tail), not 9
    expect((await state.snapshot('m', ['a'], [9])).matchBlocks.get('a')).toBe(1);
    expect((await state.snapshot('m', ['a'], [1, 2])).matchBlocks.get('a')).toBe(1);
  });

  it('forgets blocks idle longer than the TTL', async () => {
    const { state, advance } = createState({ blockIdleTtlMs: 1000 });
    await state.reserve('m', 'a', 'l1', [1, 2], 0);
    advance(500);
    expect((await state.snapshot('m', ['a'], [1, 2])).matchBlocks.get('a')).toBe(2);
    advance(600);
    expect((await state.snapshot('m', ['a'], [1, 2])).matchBlocks.get('a')).toBeUndefined();
  });

  it('forgets a backend', async () => {
    const { state } = createState();
    await state.reserve('m', 'a', 'l1', [1, 2], 0);
    await state.reserve('m', 'b', 'l2', [1, 2], 0);
    await state.forgetBackend('m', 'a');
    const snapshot = await state.snapshot('m', ['a', 'b'], [1, 2]);
    expect(snapshot.matchBlocks.get('a')).toBeUndefined();
    expect(snapshot.matchBlocks.get('b')).toBe(2);
  });

  it('keeps no lease book for a forgotten backend: at once with nothing in flight, else once its last lease is released', async () => {
    const { state } = createState();
    await state.reserve('m', 'gone', 'l1', [1], 0);
    await state.release('m', 'gone', 'l1');
    await state.reserve('m', 'busy', 'l2', [1], 0);
    await state.forgetBackend('m', 'gone');
    await state.forgetBackend('m', 'busy');
    expect([...state.inflightCounts().keys()]).toEqual(['busy']);
    expect(await state.renew('m', 'busy', 'l2')).toBe(true);
    await state.release('m', 'busy', 'l2');
    expect([...state.inflightCounts().keys()]).toEqual([]);
    // Routed to again (an engine restart forgets a backend too): a new book.
    await state.reserve('m', 'busy', 'l3', [1], 0);
    expect(state.inflightCounts().get('busy')).toBe(1);
  });
});
