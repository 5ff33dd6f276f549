import {
  createCacheAwarePolicy,
  decide,
  InMemoryRoutingState,
  type BlockHash,
  type OwnershipCorrection,
  type RoutingStateStore,
} from '@kvroute/routing';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { manualClock, openRedisTestContext, type ManualClock, type RedisTestContext } from './redis-test-context';

// learn: corrections from responses' cached-token reports and calibration batches, the same on the
// Redis store (learn.lua, the owner index's retention) and the in-memory one.
let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-learn' });
});
beforeEach(() => ctx.beginTest('learn'));
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

const IDLE_TTL_MS = 600_000;
const stores: [string, (clock: ManualClock) => RoutingStateStore][] = [
  ['redis', (clock) => ctx.createState({ nowMs: clock.nowMs, blockIdleTtlMs: IDLE_TTL_MS })],
  [
    'in-memory',
    (clock) =>
      new InMemoryRoutingState({
        maxBlocksPerBackend: 10_000,
        blockIdleTtlMs: IDLE_TTL_MS,
        refreshGranularityMs: 1000,
        nowMs: clock.nowMs,
      }),
  ],
  // The router's default (blockRefreshMs): a learned retention, not the granularity, must then decide when an entry is refreshed.
  [
    'in-memory, refreshed at 60 s,',
    (clock) =>
      new InMemoryRoutingState({
        maxBlocksPerBackend: 10_000,
        blockIdleTtlMs: IDLE_TTL_MS,
        refreshGranularityMs: 60_000,
        nowMs: clock.nowMs,
      }),
  ],
];

const chainA = [11, 12, 13, 14];
const chainB = [21, 22, 23];
const chainC = [31, 32];

async function depthOn(store: RoutingStateStore, backend: string, chain: readonly number[]): Promise<number> {
  return (await store.snapshot('m', [backend], chain)).matchBlocks.get(backend) ?? 0;
}

/**
 * The correction of a response routed to `backend` now whose engine held less of `chain` than
 * predicted: the evidence time as a routing read (the snapshot) saw it.
 */
async function overprediction(
  store: RoutingStateStore,
  clock: ManualClock,
  backend: string,
  chain: readonly BlockHash[],
): Promise<OwnershipCorrection> {
  const snapshot = await store.snapshot('m', [backend], chain);
  return {
    backendId: backend,
    outcome: 'overpredicted',
    blockHashes: chain,
    routedAtMs: clock.nowMs(),
    matchRecordedAtMs: snapshot.matchRecordedAtMs?.get(backend) ?? null,
  };
}

/**
 * One request for `chain` routed by cacheaware to the pool's only backend 'a', recorded as the policy
 * records it (at routing, or at its first output: `prefillDone`), as the router does before the
 * response ends; answers the correction of a response whose engine held nothing of it.
 */
async function routeThenEvicted(
  store: RoutingStateStore,
  clock: ManualClock,
  ownershipAt: 'routing' | 'first-token',
  chain: readonly BlockHash[],
  leaseId: string,
): Promise<OwnershipCorrection> {
  const routedAtMs = clock.nowMs();
  const result = await decide(store, {
    pool: 'm',
    request: {
      model: 'm',
      blockHashes: chain,
      blockSizeBytes: 256,
      textBytes: 256 * chain.length,
      contextBlocks: 0,
      headHash: chain[0] as BlockHash,
      sessionKey: null,
    },
    backends: [{ id: 'a', weight: 1 }],
    policy: createCacheAwarePolicy({ ownershipAt }),
    context: { nowMs: routedAtMs, random: () => 0.5 },
    leaseId,
  });
  await store.prefillDone('m', 'a', leaseId, result.blocksAtFirstOutput);
  const chosen = result.candidates[0];
  return {
    backendId: 'a',
    outcome: 'overpredicted',
    blockHashes: chain,
    routedAtMs,
    matchRecordedAtMs: chosen?.matchRecordedAtMs ?? null,
  };
}

describe.each(stores)('learn on the %s store', (_name, make) => {
  it('an overprediction teaches the backend a retention: entries older than the evicted one stop counting, the request itself stays held', async () => {
    const clock = manualClock(1_000_000);
    const store = make(clock);
    await store.reserve('m', 'a', 'l1', chainA, 0); // t0
    clock.advance(5_000);
    await store.reserve('m', 'a', 'l2', chainB, 0); // t0 + 5 s
    clock.advance(4_000);
    await store.reserve('m', 'a', 'l3', chainC, 0); // t0 + 9 s
    clock.advance(1_000);
    expect([
      await depthOn(store, 'a', chainA),
      await depthOn(store, 'a', chainB),
      await depthOn(store, 'a', chainC),
    ]).toEqual([4, 3, 2]);

    // A request for B routed now found only B's first block cached: block 2, recorded 5 s ago, was gone.
    const reply = await store.learn('m', {
      correction: await overprediction(store, clock, 'a', chainB),
      calibration: null,
    });
    expect(reply.retentionMs).toBe(5_000);
    expect(await depthOn(store, 'a', chainA)).toBe(0); // older than the evidence: believed gone
    expect(await depthOn(store, 'a', chainB)).toBe(3); // the engine computed it again for this request
    expect(await depthOn(store, 'a', chainC)).toBe(2); // younger than the retention
    clock.advance(5_001);
    expect(await depthOn(store, 'a', chainC)).toBe(0); // now older than the retention too
  });

  it('evidence younger than the minimum age (a sibling still prefilling) teaches nothing', async () => {
    const clock = manualClock(1_000_000);
    const store = make(clock);
    await store.reserve('m', 'a', 'l1', chainA, 0);
    clock.advance(200);
    const reply = await store.learn('m', {
      correction: await overprediction(store, clock, 'a', chainA),
      calibration: null,
    });
    expect(reply.retentionMs).toBeNull();
    clock.advance(60_000);
    expect(await depthOn(store, 'a', chainA)).toBe(4);
  });

  it('an underprediction grows a learned retention by a quarter, and only a learned one', async () => {
    const clock = manualClock(1_000_000);
    const store = make(clock);
    const under = {
      backendId: 'a',
      outcome: 'underpredicted' as const,
      blockHashes: chainA,
      routedAtMs: clock.nowMs(),
      matchRecordedAtMs: null,
    };
    expect((await store.learn('m', { correction: under, calibration: null })).retentionMs).toBeNull();
    await store.reserve('m', 'a', 'l1', chainA, 0);
    clock.advance(8_000);
    await store.learn('m', { correction: await overprediction(store, clock, 'a', chainA), calibration: null });
    expect((await store.learn('m', { correction: under, calibration: null })).retentionMs).toBe(10_000);
  });

  it('a chain in steady use is refreshed when recorded again, so it does not age out between uses', async () => {
    const clock = manualClock(1_000_000);
    const store = make(clock);
    await store.reserve('m', 'a', 'l1', chainA, 0);
    await store.reserve('m', 'a', 'l2', chainB, 0);
    clock.advance(10_000);
    await store.learn('m', { correction: await overprediction(store, clock, 'a', chainB), calibration: null }); // retention 10 s
    for (let use = 0; use < 6; use++) {
      clock.advance(4_000); // each use 4 s after the last: within the retention, past half of it every other time
      expect(await depthOn(store, 'a', chainB)).toBe(3);
      await store.reserve('m', 'a', `use${use}`, chainB, 0);
    }
  });

  // The evidence is the deepest matched block's entry time as the routing call read it: by the
  // response, the request's own recording has rewritten that entry (Redis: once older than half the
  // retention; in memory: once older than the 1 s refresh granularity), so a time read at learn
  // time lost all evidence older than that and the retention could only ratchet down.
  describe.each(['routing', 'first-token'] as const)(
    'with ownership recorded at %s, the evidence is read at routing',
    (ownershipAt) => {
      /** A retention of 10 s, learned from chain A evicted 10 s after it was recorded. */
      async function learnTenSeconds(store: RoutingStateStore, clock: ManualClock): Promise<void> {
        await store.reserve('m', 'a', 'seed', chainA, 0);
        clock.advance(10_000);
        const reply = await store.learn('m', {
          correction: await routeThenEvicted(store, clock, ownershipAt, chainA, 'evicted-a'),
          calibration: null,
        });
        expect(reply.retentionMs).toBe(10_000);
      }

      it("a backend learns a retention although the request's own recording refreshed the evicted entry", async () => {
        const clock = manualClock(1_000_000);
        await learnTenSeconds(make(clock), clock);
      });

      it('evidence older than half the retention still counts', async () => {
        const clock = manualClock(1_000_000);
        const store = make(clock);
        await learnTenSeconds(store, clock);
        await store.reserve('m', 'a', 'b', chainB, 0);
        clock.advance(8_000); // past half the retention: routing it rewrites the entry
        const reply = await store.learn('m', {
          correction: await routeThenEvicted(store, clock, ownershipAt, chainB, 'evicted-b'),
          calibration: null,
        });
        expect(reply.retentionMs).toBe(9_400); // 0.7 · 10 s + 0.3 · 8 s
      });

      it('a retention lowered by young evidence moves back up on older evidence: no ratchet', async () => {
        const clock = manualClock(1_000_000);
        const store = make(clock);
        await learnTenSeconds(store, clock);
        await store.reserve('m', 'a', 'b', chainB, 0);
        clock.advance(6_000);
        await store.reserve('m', 'a', 'c', chainC, 0);
        clock.advance(2_000);
        // Both routed now; C's response comes back first.
        const evictedB = await routeThenEvicted(store, clock, ownershipAt, chainB, 'evicted-b'); // 8 s old
        const evictedC = await routeThenEvicted(store, clock, ownershipAt, chainC, 'evicted-c'); // 2 s old
        expect((await store.learn('m', { correction: evictedC, calibration: null })).retentionMs).toBe(7_600);
        expect((await store.learn('m', { correction: evictedB, calibration: null })).retentionMs).toBe(7_720); // 0.7 · 7.6 s + 0.3 · 8 s
      });

      it('evidence from before the backend was forgotten (a restart between routing and the response) teaches nothing', async () => {
        const clock = manualClock(1_000_000);
        const store = make(clock);
        await store.reserve('m', 'a', 'seed', chainA, 0);
        clock.advance(5_000);
        const evicted = await routeThenEvicted(store, clock, ownershipAt, chainA, 'evicted-a');
        clock.advance(10);
        await store.forgetBackend('m', 'a');
        expect((await store.learn('m', { correction: evicted, calibration: null })).retentionMs).toBeNull();
      });
    },
  );

  it('calibration batches merge into one learned figure per pool: a running mean, then a moving one', async () => {
    const clock = manualClock(1_000_000);
    const store = make(clock);
    const first = await store.learn('m', {
      correction: null,
      calibration: { bytesPerToken: { samples: 4, sum: 8 }, prefillMsPerToken: { samples: 1, sum: 0.125 } },
    });
    expect(first.calibration.bytesPerToken).toEqual({ value: 2, samples: 4 });
    const second = await store.learn('m', {
      correction: null,
      calibration: { bytesPerToken: { samples: 4, sum: 16 } },
    });
    expect(second.calibration.bytesPerToken?.value).toBeCloseTo(3, 5);
    expect(second.calibration.bytesPerToken?.samples).toBe(8);
    expect(second.calibration.prefillMsPerToken?.value).toBeCloseTo(0.125, 5);
    // A batch larger than the window replaces the value: it never overshoots (to below 0, say).
    const busy = await store.learn('m', {
      correction: null,
      calibration: { queueMsPerRequest: { samples: 1_000, sum: 500 } },
    });
    expect(busy.calibration.queueMsPerRequest?.value).toBeCloseTo(0.5, 5);
    const busier = await store.learn('m', {
      correction: null,
      calibration: { queueMsPerRequest: { samples: 5_000, sum: 0 } },
    });
    expect(busier.calibration.queueMsPerRequest?.value).toBe(0);
    // Another pool learns on its own.
    expect((await store.learn('other', { correction: null, calibration: null })).calibration).toEqual({});
  });
});

describe('learn on the redis store is shared', () => {
  it("what one replica learned, another replica's lookups and replies see at once", async () => {
    const clock = manualClock(1_000_000);
    const one = ctx.createState({ nowMs: clock.nowMs, blockIdleTtlMs: IDLE_TTL_MS });
    const two = ctx.createState({ nowMs: clock.nowMs, blockIdleTtlMs: IDLE_TTL_MS });
    await one.reserve('m', 'a', 'l1', chainA, 0);
    clock.advance(3_000);
    await one.reserve('m', 'a', 'l2', chainB, 0);
    clock.advance(3_000);
    await one.learn('m', {
      correction: await overprediction(one, clock, 'a', chainB),
      calibration: { bytesPerToken: { samples: 30, sum: 60 } },
    });
    expect(await depthOn(two, 'a', chainA)).toBe(0);
    expect(await depthOn(two, 'a', chainB)).toBe(3);
    expect((await two.learn('m', { correction: null, calibration: null })).calibration.bytesPerToken).toEqual({
      value: 2,
      samples: 30,
    });
  });

  it('forgetting a backend (a restart) keeps its learned retention', async () => {
    const clock = manualClock(1_000_000);
    const store = ctx.createState({ nowMs: clock.nowMs, blockIdleTtlMs: IDLE_TTL_MS });
    await store.reserve('m', 'a', 'l1', chainA, 0);
    clock.advance(4_000);
    await store.learn('m', { correction: await overprediction(store, clock, 'a', chainA), calibration: null });
    clock.advance(10);
    await store.forgetBackend('m', 'a');
    expect(await depthOn(store, 'a', chainA)).toBe(0);
    clock.advance(10);
    await store.reserve('m', 'a', 'l2', chainA, 0);
    clock.advance(3_000);
    expect(await depthOn(store, 'a', chainA)).toBe(4);
    clock.advance(1_500);
    expect(await depthOn(store, 'a', chainA)).toBe(0); // 4.5 s old: past the 4 s retention learned before the forget
  });
});

describe.each(stores)('ageing keeps prefix closure on the %s store', (_name, make) => {
  it('a shared prefix refreshed by other chains never leaves a chain visible past a hidden middle', async () => {
    const clock = manualClock(1_000_000);
    const store = make(clock);
    const S = [1, 2];
    const a = [...S, 101];
    const b = [...S, 201];
    const bLong = [...b, ...Array.from({ length: 12 }, (_, i) => 300 + i)];
    // A retention of 10 s, learned from a first eviction.
    await store.reserve('m', 'x', 'l0', [900, 901], 0);
    clock.advance(10_000);
    await store.learn('m', { correction: await overprediction(store, clock, 'x', [900, 901]), calibration: null });
    await store.reserve('m', 'x', 'l1', a, 0); // t0
    clock.advance(4_000);
    await store.reserve('m', 'x', 'l2', b, 0); // its last block no newer than the prefix (t0)
    clock.advance(1_000);
    await store.reserve('m', 'x', 'l3', a, 0); // the prefix refreshed at t0 + 5 s
    clock.advance(3_000);
    await store.reserve('m', 'x', 'l4', bLong, 0); // b's block 3 (t0) is stale: rewritten, the tail with it
    clock.advance(6_500); // t0 + 14.5 s: what was recorded at t0 is hidden
    const depth = async (chain: readonly number[]) =>
      (await store.snapshot('m', ['x'], chain)).matchBlocks.get('x') ?? 0;
    const shallow = await depth(b);
    const deep = await depth(bLong);
    // Whatever is visible is a prefix: the longer chain never matches deeper than its visible start allows.
    expect(deep === bLong.length ? shallow === b.length : deep <= shallow).toBe(true);
    expect(shallow).toBe(3);
    expect(deep).toBe(bLong.length);
  });
});
