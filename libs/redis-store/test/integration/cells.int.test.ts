import { createCacheAwarePolicy, decide, type DecideInput, type RoutingPolicy } from '@kvroute/routing';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { poolKeys } from '../../src/keys';
import { backendCell } from '../../src/pool-cells';
import { openRedisTestContext, type RedisTestContext } from './redis-test-context';

/**
 * Issue 15 (one hot model beyond one shard, docs/adr/0007): a pool split into cells keeps each
 * backend's leases and ownership in its own cell's keys, decides each request in the cell its
 * conversation opened in (its first turn: so a conversation keeps finding its owner), spills to the
 * next cell only when every backend of the first is saturated, and leaks no lease doing so.
 */

let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-cells' });
});
beforeEach(() => ctx.beginTest('cells'));
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

const CELLS = 3;
const BACKENDS = Array.from({ length: 12 }, (_, index) => ({ id: `backend-${index}`, weight: 1 }));

/** A chat turn of `blocks` blocks whose first turn is its first 4 blocks (the same in every turn of the conversation). */
function inputOf(
  conversation: number,
  blocks: number,
  leaseId: string,
  policy: RoutingPolicy = createCacheAwarePolicy(),
): DecideInput {
  const blockHashes = Array.from({ length: blocks }, (_, index) => conversation * 10_000 + index + 1);
  return {
    pool: 'm',
    request: {
      model: 'm',
      blockHashes,
      blockSizeBytes: 256,
      textBytes: blocks * 256 + 100,
      contextBlocks: blocks - 2,
      // The head is the same for all (a shared system prompt's first block): only the first turn tells conversations apart.
      headHash: 1,
      firstTurnBytes: { start: 100, end: 4 * 256 },
      sessionKey: null,
    },
    backends: BACKENDS,
    policy,
    context: { nowMs: 0, random: () => 0.5 },
    leaseId,
  };
}

const routedTo = (result: Awaited<ReturnType<typeof decide>>): string =>
  result.decision.kind === 'routed' ? result.decision.backendId : '';

describe('a pool split into cells (poolCells)', () => {
  it("keeps a lease and its ownership in the chosen backend's cell, and a conversation finds its owner there", async () => {
    const state = ctx.createState({ poolCells: CELLS });
    const first = await decide(state, inputOf(7, 20, 'turn-1'));
    const owner = routedTo(first);
    const cell = backendCell(owner, CELLS);
    // Only the cell's backends took part.
    expect(first.candidates.every((candidate) => backendCell(candidate.backend.id, CELLS) === cell)).toBe(true);
    const keys = poolKeys('m', ctx.namespace, { index: cell, count: CELLS });
    expect(await ctx.redis.hget(keys.inflight, owner)).toBe('1');
    for (const other of [0, 1, 2].filter((c) => c !== cell))
      expect(await ctx.redis.exists(poolKeys('m', ctx.namespace, { index: other, count: CELLS }).inflight)).toBe(0);
    await state.release('m', owner, 'turn-1', first.blocksAtFirstOutput);
    expect(await ctx.redis.hexists(keys.ownersNew, String(7 * 10_000 + 20))).toBe(1);

    const next = await decide(state, inputOf(7, 24, 'turn-2'));
    expect(routedTo(next)).toBe(owner);
    expect(next.candidates.find((candidate) => candidate.backend.id === owner)?.matchBlocks).toBe(20);
    await state.release('m', owner, 'turn-2');
    expect(Number(await ctx.redis.hget(keys.inflight, owner))).toBe(0);
  });

  it('spreads conversations over every cell, and a snapshot reads each backend in its own cell', async () => {
    const state = ctx.createState({ poolCells: CELLS });
    const cellsUsed = new Set<number>();
    const owners: string[] = [];
    for (let conversation = 1; conversation <= 30; conversation++) {
      const result = await decide(state, inputOf(conversation, 8, `c-${conversation}`));
      owners.push(routedTo(result));
      cellsUsed.add(backendCell(routedTo(result), CELLS));
      await state.release('m', routedTo(result), `c-${conversation}`, result.blocksAtFirstOutput);
    }
    expect(cellsUsed.size).toBe(CELLS);
    const snapshot = await state.snapshot(
      'm',
      BACKENDS.map((backend) => backend.id),
      inputOf(5, 8, 'x').request.blockHashes,
    );
    expect([...snapshot.matchBlocks]).toEqual([[owners[4], 8]]);
  });

  it('spreads conversations that all start with one system prompt (the cell key is past it)', async () => {
    const state = ctx.createState({ poolCells: CELLS });
    const cellsUsed = new Set<number>();
    for (let conversation = 1; conversation <= 30; conversation++) {
      const input = inputOf(conversation, 80, `s-${conversation}`);
      // Blocks 1..16 (4 KiB) the same for every conversation; chained hashes differ after.
      const blockHashes = input.request.blockHashes.map((hash, index) => (index < 16 ? 500 + index : hash));
      const result = await decide(state, {
        ...input,
        request: { ...input.request, blockHashes, headHash: 500, firstTurnBytes: { start: 16 * 256, end: 20 * 256 } },
      });
      cellsUsed.add(backendCell(routedTo(result), CELLS));
      await state.release('m', routedTo(result), `s-${conversation}`);
    }
    expect(cellsUsed.size).toBe(CELLS);
  });

  it("spills to the next cell when every backend of the request's cell is saturated, releasing the first cell's lease", async () => {
    const spills: string[] = [];
    const state = ctx.createState({ poolCells: CELLS, onCellSpill: (pool) => spills.push(pool) });
    const policy = createCacheAwarePolicy({ saturationInflight: 1 });
    const probe = await decide(state, inputOf(3, 8, 'probe', policy));
    const home = backendCell(routedTo(probe), CELLS);
    await state.release('m', routedTo(probe), 'probe');
    // Fill every backend of the home cell to the valve.
    const homeBackends = BACKENDS.filter((backend) => backendCell(backend.id, CELLS) === home);
    for (const backend of homeBackends)
      expect(await state.reserve('m', backend.id, `fill-${backend.id}`, [], 0)).toBe(true);

    const spilled = await decide(state, inputOf(3, 8, 'spilled', policy));
    expect(spills).toEqual(['m']);
    expect(backendCell(routedTo(spilled), CELLS)).not.toBe(home);
    // The home cell's tentative lease is gone (its release, not awaited, went out on this connection before
    // these reads): each of its backends holds only its filler.
    const homeKeys = poolKeys('m', ctx.namespace, { index: home, count: CELLS });
    for (const backend of homeBackends) expect(await ctx.redis.hget(homeKeys.inflight, backend.id)).toBe('1');
    expect(await ctx.redis.zcard(homeKeys.leaseDeadlines)).toBe(homeBackends.length);
    await state.release('m', routedTo(spilled), 'spilled');
    for (const backend of homeBackends) await state.release('m', backend.id, `fill-${backend.id}`);
  });

  it("keeps the first cell's decision, and its lease only, when the spill's call fails", async () => {
    // A real Redis; the client in front of it fails the second route call (a shard failing mid-decision).
    let routeCalls = 0;
    const failing = new Proxy(ctx.redis, {
      get(target, name, receiver) {
        const value = Reflect.get(target, name, receiver) as unknown;
        if (name !== 'callBuffer' || typeof value !== 'function') return value;
        return (...args: unknown[]) =>
          ++routeCalls === 2
            ? Promise.reject(new Error('CLUSTERDOWN injected'))
            : (value as (...a: unknown[]) => unknown).apply(target, args);
      },
    });
    const state = ctx.createState({ poolCells: CELLS, redis: failing });
    const plain = ctx.createState({ poolCells: CELLS });
    const policy = createCacheAwarePolicy({ saturationInflight: 1 });
    const home = plain.decisionScope('m', inputOf(6, 8, 'x').request, BACKENDS).cell as number;
    const homeBackends = BACKENDS.filter((backend) => backendCell(backend.id, CELLS) === home);
    for (const backend of homeBackends) await plain.reserve('m', backend.id, `fill-${backend.id}`, [], 0);
    const others = [0, 1, 2].filter((cell) => cell !== home);
    routeCalls = 0;

    const result = await decide(state, inputOf(6, 8, 'spill-fails', policy));
    expect(routeCalls).toBe(2);
    const kept = routedTo(result);
    expect(backendCell(kept, CELLS)).toBe(home);
    const homeKeys = poolKeys('m', ctx.namespace, { index: home, count: CELLS });
    // Its lease is held (not released as a passed-over one), and nothing was taken elsewhere.
    expect(await ctx.redis.zcard(homeKeys.leaseDeadlines)).toBe(homeBackends.length + 1);
    expect(await ctx.redis.zscore(homeKeys.leaseDeadlines, `${kept.length}:${kept}spill-fails`)).not.toBeNull();
    for (const cell of others)
      expect(await ctx.redis.zcard(poolKeys('m', ctx.namespace, { index: cell, count: CELLS }).leaseDeadlines)).toBe(0);
  });

  it('records ownership at routing only for the backend kept after a spill, never for the one passed over', async () => {
    const state = ctx.createState({ poolCells: CELLS });
    const policy = createCacheAwarePolicy({ saturationInflight: 1, ownershipAt: 'routing' });
    const probe = await decide(state, inputOf(4, 8, 'probe', createCacheAwarePolicy({ saturationInflight: 1 })));
    const home = backendCell(routedTo(probe), CELLS);
    await state.release('m', routedTo(probe), 'probe');
    const homeBackends = BACKENDS.filter((backend) => backendCell(backend.id, CELLS) === home);
    for (const backend of homeBackends) await state.reserve('m', backend.id, `fill-${backend.id}`, [], 0);

    const spilled = await decide(state, inputOf(4, 8, 'spilled', policy));
    const kept = routedTo(spilled);
    expect(backendCell(kept, CELLS)).not.toBe(home);
    const lastBlock = String(4 * 10_000 + 8);
    expect(
      await ctx.redis.hexists(poolKeys('m', ctx.namespace, { index: home, count: CELLS }).ownersNew, lastBlock),
    ).toBe(0);
    expect(
      await ctx.redis.hget(
        poolKeys('m', ctx.namespace, { index: backendCell(kept, CELLS), count: CELLS }).ownersNew,
        lastBlock,
      ),
    ).toContain(kept);
    // The passed-over lease's release is not awaited, but it went out on this connection before the read below.
    expect(await ctx.redis.zcard(poolKeys('m', ctx.namespace, { index: home, count: CELLS }).leaseDeadlines)).toBe(
      homeBackends.length,
    );
    await state.release('m', kept, 'spilled');
    for (const backend of homeBackends) await state.release('m', backend.id, `fill-${backend.id}`);
  });

  it("writes a correction into its backend's cell and the calibration into cell 0", async () => {
    const state = ctx.createState({ poolCells: CELLS });
    const backend = BACKENDS.find((candidate) => backendCell(candidate.id, CELLS) !== 0)?.id as string;
    const cell = backendCell(backend, CELLS);
    const reply = await state.learn('m', {
      correction: {
        backendId: backend,
        outcome: 'overpredicted',
        blockHashes: [1, 2, 3],
        routedAtMs: Date.now(),
        matchRecordedAtMs: Date.now() - 60_000,
      },
      calibration: { prefillMsPerToken: { samples: 4, sum: 0.2 } },
    });
    expect(reply.retentionMs).not.toBeNull();
    expect(reply.calibration.prefillMsPerToken?.samples).toBe(4);
    expect(
      await ctx.redis.hget(poolKeys('m', ctx.namespace, { index: cell, count: CELLS }).forgotten, backend),
    ).toContain('|');
    expect(await ctx.redis.exists(poolKeys('m', ctx.namespace, { index: 0, count: CELLS }).calibration)).toBe(1);
    expect(await ctx.redis.exists(poolKeys('m', ctx.namespace, { index: cell, count: CELLS }).calibration)).toBe(0);
  });
});
