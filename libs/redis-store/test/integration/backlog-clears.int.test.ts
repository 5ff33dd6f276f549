import { type AtomicRule, createCacheAwarePolicy, decide, type BackendInfo, type DecideInput } from '@kvroute/routing';
import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { poolKeys } from '../../src/keys';
import { routeScriptOf } from '../../src/route-call';
import { preloadScript, SCRIPTS } from '../../src/scripts';
import { openRedisTestContext, type RedisTestContext } from './redis-test-context';

/**
 * A non-streaming request's backlog clear (RoutingState.clearBacklog, issue 30) rides on the replica's next decision
 * in the pool (route.lua ARGV[15]) instead of a script call of its own; one that no decision takes in time goes out
 * alone (clear-backlogs.lua); a released lease's is dropped; a failed decision call puts its clears back.
 */

let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-backlog-clears' });
});
beforeEach(async () => {
  ctx.beginTest('clears');
  // Loaded beforehand, so no call below is answered NOSCRIPT or "Function not found" and sent again.
  await preloadScript(ctx.redis, routeScriptOf(createCacheAwarePolicy().atomicRule as AtomicRule));
  await preloadScript(ctx.redis, SCRIPTS.clearBacklogs);
});
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

/** route.lua's ARGV[15], as an index into a call's arguments. */
const BACKLOG_CLEARS_ARG = 14;

interface SentCall {
  readonly keyCount: number;
  readonly args: string[];
}

/** The test's Redis with every script call recorded; `failNext()` makes the next one fail before it is sent. */
function recording(redis: Redis): { redis: Redis; calls: SentCall[]; failNext: () => void } {
  const calls: SentCall[] = [];
  let failing = false;
  const proxy = new Proxy(redis, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver) as unknown;
      if ((name !== 'callBuffer' && name !== 'call') || typeof value !== 'function') return value;
      return (command: string, argv: (string | number)[]) => {
        if (failing) {
          failing = false;
          return Promise.reject(new Error('connection lost (injected)'));
        }
        const keyCount = Number(argv[1]);
        calls.push({ keyCount, args: argv.slice(2 + keyCount).map(String) });
        return (value as (...a: unknown[]) => unknown).call(target, command, argv);
      };
    },
  });
  return { redis: proxy, calls, failNext: () => (failing = true) };
}

const BACKENDS: BackendInfo[] = [
  { id: 'a', weight: 1 },
  { id: 'b', weight: 1 },
];

function inputOf(leaseId: string, seed: number): DecideInput {
  return {
    pool: 'm',
    request: {
      model: 'm',
      blockHashes: [seed * 10 + 1, seed * 10 + 2],
      blockSizeBytes: 256,
      textBytes: 600,
      contextBlocks: 0,
      headHash: seed,
      sessionKey: null,
    },
    backends: BACKENDS,
    policy: createCacheAwarePolicy(),
    context: { nowMs: 0, random: () => 0.5 },
    leaseId,
  };
}

async function pendingOf(backendId: string): Promise<number> {
  return Number((await ctx.redis.hget(poolKeys('m', ctx.namespace).pending, backendId)) ?? 0);
}

async function routed(state: ReturnType<RedisTestContext['createState']>, leaseId: string, seed: number) {
  const { decision } = await decide(state, inputOf(leaseId, seed));
  if (decision.kind !== 'routed') throw new Error(`not routed: ${decision.kind}`);
  return decision.backendId;
}

async function eventually(check: () => Promise<boolean>, withinMs: number): Promise<void> {
  const deadline = Date.now() + withinMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`not within ${withinMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

describe('backlog clears', () => {
  it("ride on the replica's next decision in the pool: no call of their own", async () => {
    const { redis, calls } = recording(ctx.redis as Redis);
    // Long enough that only the decision can have carried it.
    const state = ctx.createState({ redis, backlogClearWaitMs: 60_000 });
    const first = await routed(state, 'l1', 1);
    const backlog = await pendingOf(first);
    expect(backlog).toBeGreaterThan(0);

    await state.clearBacklog('m', first, 'l1');
    expect(calls).toHaveLength(1);
    expect(state.backlogClearsWaiting).toBe(1);
    expect(await pendingOf(first)).toBe(backlog);

    const second = await routed(state, 'l2', 2);
    expect(calls).toHaveLength(2);
    expect(calls[1]?.args[BACKLOG_CLEARS_ARG]).toBe(`${first}\tl1\n`);
    expect(state.backlogClearsWaiting).toBe(0);
    // l1's prefill left the backlog before the decision read it; l2's is there (on whichever backend it went).
    const l2Tokens = Number(await ctx.redis.hget(poolKeys('m', ctx.namespace).prefill(second), 'l2'));
    expect(await pendingOf(first)).toBe(first === second ? l2Tokens : 0);
    // Still in flight: only the backlog went.
    expect(await ctx.redis.hget(poolKeys('m', ctx.namespace).inflight, first)).not.toBeNull();
    expect(await ctx.redis.hget(poolKeys('m', ctx.namespace).prefill(first), 'l1')).toBe('0');
  });

  it('go out alone, several in one call, when no decision comes within the wait', async () => {
    const { redis, calls } = recording(ctx.redis as Redis);
    const state = ctx.createState({ redis, backlogClearWaitMs: 30 });
    const leases = ['l1', 'l2', 'l3'];
    const owners = [];
    for (const [k, lease] of leases.entries()) owners.push(await routed(state, lease, k + 1));
    const decisions = calls.length;
    for (const [k, lease] of leases.entries()) await state.clearBacklog('m', owners[k] as string, lease);
    await eventually(async () => (await pendingOf('a')) + (await pendingOf('b')) === 0, 2_000);
    expect(calls.length - decisions).toBe(1);
    expect(calls[decisions]?.keyCount).toBe(1);
    expect(state.backlogClearsWaiting).toBe(0);
  });

  it("of a released lease are dropped (the release took the lease's prefill off the backlog)", async () => {
    const { redis, calls } = recording(ctx.redis as Redis);
    const state = ctx.createState({ redis, backlogClearWaitMs: 20 });
    const backend = await routed(state, 'l1', 1);
    await state.clearBacklog('m', backend, 'l1');
    await state.release('m', backend, 'l1');
    expect(state.backlogClearsWaiting).toBe(0);
    const callsAfterRelease = calls.length;
    await new Promise((resolve) => setTimeout(resolve, 80));
    expect(calls).toHaveLength(callsAfterRelease);
    expect(await pendingOf(backend)).toBe(0);
  });

  it('carried by a decision call that failed are put back, and the next decision carries them', async () => {
    const { redis, calls, failNext } = recording(ctx.redis as Redis);
    const state = ctx.createState({ redis, backlogClearWaitMs: 60_000 });
    const first = await routed(state, 'l1', 1);
    await state.clearBacklog('m', first, 'l1');
    failNext();
    await expect(decide(state, inputOf('l2', 2))).rejects.toThrow();
    expect(state.backlogClearsWaiting).toBe(1);
    await routed(state, 'l3', 3);
    expect(calls.at(-1)?.args[BACKLOG_CLEARS_ARG]).toBe(`${first}\tl1\n`);
    expect(await ctx.redis.hget(poolKeys('m', ctx.namespace).prefill(first), 'l1')).toBe('0');
  });

  it("of a split pool clear each lease in its own cell's keys", async () => {
    const state = ctx.createState({ poolCells: 4, backlogClearWaitMs: 60_000 });
    const backends = Array.from({ length: 12 }, (_, i) => ({ id: `10.9.0.${i}:8000`, weight: 1 }));
    let previous: { backend: string; lease: string } | null = null;
    for (let k = 1; k <= 20; k++) {
      const { decision } = await decide(state, { ...inputOf(`s${k}`, k), backends });
      if (decision.kind !== 'routed') throw new Error(`not routed: ${decision.kind}`);
      if (previous !== null) await state.clearBacklog('m', previous.backend, previous.lease);
      previous = { backend: decision.backendId, lease: `s${k}` };
    }
    await state.sendBacklogClears();
    // Every lease's prefill cleared but the last one's, which nothing cleared: the pool's backlog is its tokens alone.
    let pending = 0;
    let lastTokens = 0;
    for (const key of await ctx.redis.keys(`${ctx.namespace}:*`)) {
      if (key.endsWith(':pending'))
        for (const value of Object.values(await ctx.redis.hgetall(key))) pending += Number(value);
      if (previous !== null && key.endsWith(`:prefill:${previous.backend}`))
        lastTokens += Number((await ctx.redis.hget(key, previous.lease)) ?? 0);
    }
    expect(lastTokens).toBeGreaterThan(0);
    expect(pending).toBe(lastTokens);
    expect(state.backlogClearsWaiting).toBe(0);
  });
});
