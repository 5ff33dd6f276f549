import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { RedisFlowQueue, type FlowCapacity, type FlowEntry } from '../../src/flow-queue';
import { flowKeys } from '../../src/keys';
import { openRedisTestContext, type RedisTestContext } from './redis-test-context';

let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-flow-queue' });
});
beforeEach(() => ctx.beginTest('flow-queue'));
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

const TWO: FlowCapacity = { capacity: 2, enginesSaturated: false, leaseTtlMs: 30_000, expressSlots: 0 };
let counter = 0;
const entry = (flow: string, overrides: Partial<FlowEntry> = {}): FlowEntry => ({
  id: `${flow}-${++counter}`,
  flow,
  costTokens: 100,
  weight: 1,
  priorityClass: 1,
  ...overrides,
});

/** Polls every queued id once a slot frees, and returns the flows in the order they were admitted. */
async function drainOrder(queue: RedisFlowQueue, queued: FlowEntry[]): Promise<string[]> {
  const order: string[] = [];
  const waiting = [...queued];
  while (waiting.length > 0) {
    let admitted = -1;
    for (const [index, candidate] of waiting.entries()) {
      if ((await queue.poll('m', candidate.id, { ...TWO, capacity: 1 })).kind === 'admitted') {
        admitted = index;
        break;
      }
    }
    expect(admitted).toBeGreaterThanOrEqual(0);
    const [done] = waiting.splice(admitted, 1) as [FlowEntry];
    order.push(done.flow);
    await queue.leave('m', done.id);
  }
  return order;
}

describe('RedisFlowQueue (flow-queue.lua)', () => {
  it('admits up to the capacity at once, then queues, and a leave frees a slot for the first queued', async () => {
    const queue = new RedisFlowQueue({ redis: ctx.redis, keyNamespace: ctx.namespace });
    const [a, b, c, d] = [entry('a'), entry('a'), entry('b'), entry('b')] as FlowEntry[];
    expect(await queue.enter('m', a as FlowEntry, TWO, 5_000)).toEqual({ kind: 'admitted', inflight: 1 });
    expect(await queue.enter('m', b as FlowEntry, TWO, 5_000)).toEqual({ kind: 'admitted', inflight: 2 });
    expect(await queue.enter('m', c as FlowEntry, TWO, 5_000)).toMatchObject({
      kind: 'queued',
      position: 1,
      inflight: 2,
    });
    expect(await queue.enter('m', d as FlowEntry, TWO, 5_000)).toMatchObject({
      kind: 'queued',
      position: 2,
      inflight: 2,
    });
    expect((await queue.poll('m', (d as FlowEntry).id, TWO)).kind).toBe('queued');
    await queue.leave('m', (a as FlowEntry).id);
    // The second in line may not take the slot before the first.
    expect(await queue.poll('m', (d as FlowEntry).id, TWO)).toMatchObject({ kind: 'queued', position: 1, inflight: 1 });
    expect(await queue.poll('m', (c as FlowEntry).id, TWO)).toEqual({ kind: 'admitted', inflight: 2 });
  });

  it('orders a greedy flow behind a light one: start-time fair queuing by tokens, weights honoured', async () => {
    const queue = new RedisFlowQueue({ redis: ctx.redis, keyNamespace: ctx.namespace });
    const full: FlowCapacity = { ...TWO, capacity: 1 };
    const holder = entry('x');
    await queue.enter('m', holder, full, 5_000);
    // The greedy flow queues 6 requests first, then the light one 2; each costs 100 tokens.
    const greedy = Array.from({ length: 6 }, () => entry('greedy'));
    const light = Array.from({ length: 2 }, () => entry('light'));
    for (const one of [...greedy, ...light]) expect((await queue.enter('m', one, full, 5_000)).kind).toBe('queued');
    await queue.leave('m', holder.id);
    // SFQ: tags greedy 0,100,…,500; light 0,100: the light flow's two go among the first four.
    const order = await drainOrder(queue, [...greedy, ...light]);
    expect(order.slice(0, 4).filter((flow) => flow === 'light')).toHaveLength(2);
  });

  it('serves a higher priority class first whatever the tags', async () => {
    const queue = new RedisFlowQueue({ redis: ctx.redis, keyNamespace: ctx.namespace });
    const full: FlowCapacity = { ...TWO, capacity: 1 };
    const holder = entry('x');
    await queue.enter('m', holder, full, 5_000);
    const low = entry('low', { priorityClass: 2, costTokens: 1 });
    const high = entry('high', { priorityClass: 0, costTokens: 10_000 });
    await queue.enter('m', low, full, 5_000);
    await queue.enter('m', high, full, 5_000);
    await queue.leave('m', holder.id);
    expect(await drainOrder(queue, [low, high])).toEqual(['high', 'low']);
  });

  it('admits nothing while the engines are saturated and something is in flight, one request when nothing is', async () => {
    const queue = new RedisFlowQueue({ redis: ctx.redis, keyNamespace: ctx.namespace });
    const saturated: FlowCapacity = { ...TWO, enginesSaturated: true };
    const first = entry('a');
    expect((await queue.enter('m', first, saturated, 5_000)).kind).toBe('admitted');
    const second = entry('a');
    expect((await queue.enter('m', second, saturated, 5_000)).kind).toBe('queued');
    expect((await queue.poll('m', second.id, saturated)).kind).toBe('queued');
    expect((await queue.poll('m', second.id, TWO)).kind).toBe('admitted');
  });

  it('drops a queued request past its queue deadline and an admitted one past its lease, by Redis time', async () => {
    const queue = new RedisFlowQueue({ redis: ctx.redis, keyNamespace: ctx.namespace });
    const short: FlowCapacity = { ...TWO, capacity: 1, leaseTtlMs: 150 };
    const holder = entry('a');
    await queue.enter('m', holder, short, 5_000);
    const waiter = entry('b');
    expect((await queue.enter('m', waiter, short, 50)).kind).toBe('queued');
    await new Promise((resolve) => setTimeout(resolve, 80));
    expect(await queue.poll('m', waiter.id, short)).toEqual({ kind: 'gone' });
    await new Promise((resolve) => setTimeout(resolve, 100));
    // The holder never renewed: its slot expired, and the next request is admitted at once.
    expect((await queue.enter('m', entry('c'), short, 5_000)).kind).toBe('admitted');
    expect(await queue.renew('m', holder.id, 1_000)).toBe(false);
  });

  it('forgets every flow’s tags once the queue is empty, and leaves no key without a bound', async () => {
    const queue = new RedisFlowQueue({ redis: ctx.redis, keyNamespace: ctx.namespace });
    const full: FlowCapacity = { ...TWO, capacity: 1 };
    const holder = entry('x');
    await queue.enter('m', holder, full, 5_000);
    const waiter = entry('greedy', { costTokens: 5_000 });
    await queue.enter('m', waiter, full, 5_000);
    const keys = flowKeys('m', ctx.namespace);
    expect(await ctx.redis.exists(keys.state)).toBe(1);
    expect(await ctx.redis.pttl(keys.state)).toBeGreaterThan(0);
    await queue.leave('m', holder.id);
    expect((await queue.poll('m', waiter.id, full)).kind).toBe('admitted');
    expect(await ctx.redis.exists(keys.state)).toBe(0);
    await queue.leave('m', waiter.id);
    expect(await ctx.redis.zcard(keys.inflight)).toBe(0);
  });

  it('admits a flow below its fair share at once into the express slots, past a greedy flow’s queue', async () => {
    const queue = new RedisFlowQueue({ redis: ctx.redis, keyNamespace: ctx.namespace });
    // Capacity 4, 2 express slots: the greedy flow fills the capacity and queues one more.
    const pool: FlowCapacity = { ...TWO, capacity: 4, expressSlots: 2 };
    const greedy = Array.from({ length: 4 }, () => entry('greedy'));
    for (const one of greedy) expect((await queue.enter('m', one, pool, 5_000)).kind).toBe('admitted');
    const greedyWaiting = entry('greedy');
    expect((await queue.enter('m', greedyWaiting, pool, 5_000)).kind).toBe('queued');
    // The light flow's share is (4 + 2) × 1/2 = 3: two go at once, beyond the capacity, until capacity + express.
    const light = [entry('light'), entry('light'), entry('light')] as [FlowEntry, FlowEntry, FlowEntry];
    expect(await queue.enter('m', light[0], pool, 5_000)).toEqual({ kind: 'admitted', inflight: 5 });
    expect(await queue.enter('m', light[1], pool, 5_000)).toEqual({ kind: 'admitted', inflight: 6 });
    expect((await queue.enter('m', light[2], pool, 5_000)).kind).toBe('queued');
    // The greedy flow runs above its share (3): it goes only below the capacity.
    await queue.leave('m', (greedy[0] as FlowEntry).id);
    await queue.leave('m', (greedy[1] as FlowEntry).id);
    await queue.leave('m', (greedy[2] as FlowEntry).id);
    // 3 running (greedy 1, light 2): a slot below the capacity is free, and the first in the queue (greedy) takes it.
    expect((await queue.poll('m', greedyWaiting.id, pool)).kind).toBe('admitted');
    const keys = flowKeys('m', ctx.namespace);
    expect(await ctx.redis.hgetall(keys.flows)).toEqual({
      'n:greedy': '2',
      'w:greedy': '1',
      'n:light': '2',
      'w:light': '1',
    });
    for (const one of [greedy[3], greedyWaiting, light[0], light[1], light[2]] as FlowEntry[])
      await queue.leave('m', one.id);
    expect(await ctx.redis.exists(keys.flows, keys.owners)).toBe(0);
  });

  it('opens no express slot while the engines say they are saturated, nor beyond capacity + express', async () => {
    const queue = new RedisFlowQueue({ redis: ctx.redis, keyNamespace: ctx.namespace });
    const pool: FlowCapacity = { ...TWO, capacity: 2, expressSlots: 1 };
    await queue.enter('m', entry('greedy'), pool, 5_000);
    await queue.enter('m', entry('greedy'), pool, 5_000);
    expect((await queue.enter('m', entry('light'), { ...pool, enginesSaturated: true }, 5_000)).kind).toBe('queued');
    expect((await queue.enter('m', entry('other'), pool, 5_000)).kind).toBe('admitted');
    // 3 running = capacity + express: a third flow below its share waits too.
    expect((await queue.enter('m', entry('third'), pool, 5_000)).kind).toBe('queued');
  });
});
