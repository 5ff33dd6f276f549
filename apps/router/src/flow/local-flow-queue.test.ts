import type { FlowCapacity, FlowEntry } from '@kvroute/redis-store';
import { describe, expect, it } from 'vitest';
import { LocalFlowQueue } from './local-flow-queue';

// Capacity 2 and 4 express slots: with two flows each one's share is (2 + 4) / 2 = 3.
const POOL: FlowCapacity = { capacity: 2, enginesSaturated: false, leaseTtlMs: 600_000, expressSlots: 4 };
let counter = 0;
const entry = (flow: string): FlowEntry => ({
  id: `${flow}-${++counter}`,
  flow,
  costTokens: 100,
  weight: 1,
  priorityClass: 1,
});

describe('LocalFlowQueue: a flow’s share judged by its average too (flow-queue.lua’s twin)', () => {
  it('gives a light flow that bunches past its share an express slot, and none to a flow that stays there', async () => {
    let now = 0;
    const averaged = new LocalFlowQueue(() => now, 1_000);
    const countOnly = new LocalFlowQueue(() => now, 0);
    for (const queue of [averaged, countOnly]) {
      for (let k = 0; k < 2; k++) expect((await queue.enter('m', entry('greedy'), POOL, 5_000)).kind).toBe('admitted');
      for (let k = 0; k < 3; k++) expect((await queue.enter('m', entry('light'), POOL, 5_000)).kind).toBe('admitted');
    }
    // Three running (its share) but ~0 on average: a fourth goes at once; by the count alone it waits.
    expect(await averaged.enter('m', entry('light'), POOL, 5_000)).toEqual({ kind: 'admitted', inflight: 6 });
    expect((await countOnly.enter('m', entry('light'), POOL, 5_000)).kind).toBe('queued');

    // A flow at 4 for five windows, then 3 (its share now, ~4 on average): refused though a slot is free.
    const kept = new LocalFlowQueue(() => now, 1_000);
    for (let k = 0; k < 2; k++) await kept.enter('m', entry('other'), POOL, 5_000);
    const keeps = Array.from({ length: 4 }, () => entry('keeps'));
    for (const one of keeps) expect((await kept.enter('m', one, POOL, 5_000)).kind).toBe('admitted');
    now += 5_000;
    await kept.leave('m', (keeps[0] as FlowEntry).id);
    expect((await kept.enter('m', entry('keeps'), POOL, 5_000)).kind).toBe('queued');
    // Held at exactly its share for long, its average nears 3 from below: the margin of one request still refuses it.
    now += 60_000;
    expect((await kept.enter('m', entry('keeps'), POOL, 5_000)).kind).toBe('queued');
  });
});
