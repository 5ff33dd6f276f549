import { createCacheAwarePolicy, decide, type DecideInput } from '@kvroute/routing';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DEFAULT_SHORTLIST } from '../../src/store-limits';
import { openRedisTestContext, type RedisTestContext } from './redis-test-context';

/**
 * Issue 15 (big pools): a pool of more than DEFAULT_SHORTLIST.above backends decides over a shortlist:
 * the backends with entries on the chain's deepest blocks (found by route.lua in the owner index) and
 * the caller's picks (rendezvous, least loaded, spread). It must find the owner wherever it sits in the
 * pool, place cold prompts as a full scan does, and keep every replica's leases exact.
 */

let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-shortlist' });
});
beforeEach(() => ctx.beginTest('shortlist'));
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

const BACKENDS = Array.from({ length: 200 }, (_, index) => ({ id: `backend-${index}`, weight: 1 }));
const policy = createCacheAwarePolicy();

/** A request of `blocks` blocks: a chain of its own per `conversation`, its first block shared by all (a system prompt). */
function inputOf(conversation: number, blocks: number, leaseId: string): DecideInput {
  const blockHashes = [1, ...Array.from({ length: blocks - 1 }, (_, index) => conversation * 10_000 + index + 2)];
  return {
    pool: 'm',
    request: {
      model: 'm',
      blockHashes,
      blockSizeBytes: 256,
      textBytes: blocks * 256 + 100,
      contextBlocks: blocks - 2,
      headHash: 1_000 + conversation,
      sessionKey: null,
    },
    backends: BACKENDS,
    policy,
    context: { nowMs: 0, random: () => 0.5 },
    leaseId,
  };
}

describe('route.lua shortlist (pools of more than 32 backends)', () => {
  it('finds the owner of a conversation anywhere in a pool of 200, deciding over a bounded shortlist', async () => {
    const state = ctx.createState();
    // Every backend holds the shared first block (what a system prompt looks like in a warm fleet).
    for (const backend of BACKENDS) await state.reserve('m', backend.id, `sys-${backend.id}`, [1], 0);
    for (const backend of BACKENDS) await state.release('m', backend.id, `sys-${backend.id}`);
    // Conversation 7's first turn was served by backend-137: it holds the whole chain.
    const owner = 'backend-137';
    await state.reserve('m', owner, 'turn-1', inputOf(7, 40, 'x').request.blockHashes, 0);
    await state.release('m', owner, 'turn-1');

    const next = await decide(state, inputOf(7, 48, 'turn-2'));
    expect(next.decision).toMatchObject({ kind: 'routed', backendId: owner });
    const considered = next.candidates.length;
    const bound =
      DEFAULT_SHORTLIST.owners + DEFAULT_SHORTLIST.preferred + DEFAULT_SHORTLIST.leastLoaded + DEFAULT_SHORTLIST.spread;
    expect(considered).toBeGreaterThan(1);
    expect(considered).toBeLessThanOrEqual(bound);
    await state.release('m', owner, 'turn-2');
  });

  it('shortlists the same backends whatever blocks the request names as boundaries (a hint of where to read)', async () => {
    const setup = ctx.createState();
    for (const backend of BACKENDS) await setup.reserve('m', backend.id, `sys-${backend.id}`, [1], 0);
    for (const backend of BACKENDS) await setup.release('m', backend.id, `sys-${backend.id}`);
    // Twice as many owners of conversation 3 as a shortlist takes, at depths 30 down to 25, between two
    // rungs (1, 7, …, 25, 31, …: 8 rungs over 48 blocks), the shallower recorded later: at rung 25, the
    // deepest rung they all hold, the most recent come first. A hint inside (28) would find the deepest.
    const chain = inputOf(3, 48, 'x').request.blockHashes;
    for (let owner = 0; owner < 2 * DEFAULT_SHORTLIST.owners; owner++) {
      const id = `backend-${10 + owner * 7}`;
      await setup.reserve('m', id, `own-${owner}`, chain.slice(0, 30 - Math.floor(owner / 3)), 0);
      await setup.release('m', id, `own-${owner}`);
    }
    const shortlisted = async (boundaryBlocks: readonly number[] | undefined): Promise<string[]> => {
      const input = inputOf(3, 48, 'same-lease');
      // A store of its own each time: the picks it adds (least loaded as it saw them) start alike.
      const { candidates } = await decide(ctx.createState(), {
        ...input,
        request: { ...input.request, ...(boundaryBlocks === undefined ? {} : { boundaryBlocks }) },
      });
      const chosen = candidates.map((candidate) => candidate.backend.id);
      for (const id of chosen) await setup.release('m', id, 'same-lease');
      return chosen.sort();
    };
    const plain = await shortlisted(undefined);
    expect(plain.length).toBeGreaterThan(DEFAULT_SHORTLIST.owners);
    for (const hints of [[28, 29], [26, 27, 30, 31], [1, 2, 47, 48], [30]]) {
      expect(await shortlisted(hints), `boundary blocks ${hints.join(',')}`).toEqual(plain);
    }
  });

  it('looks past owners that are not candidates (removed or ineligible backends) to the live one', async () => {
    const state = ctx.createState();
    const owner = 'backend-151';
    const chain = inputOf(9, 30, 'x').request.blockHashes;
    await state.reserve('m', owner, 'turn-1', chain, 0);
    await state.release('m', owner, 'turn-1');
    // Then 12 backends no longer in the pool served the same chain: the newest entries are theirs.
    for (let ghost = 0; ghost < 12; ghost++) {
      await state.reserve('m', `gone-${ghost}`, `ghost-${ghost}`, chain, 0);
      await state.release('m', `gone-${ghost}`, `ghost-${ghost}`);
    }
    const next = await decide(state, inputOf(9, 34, 'turn-2'));
    expect(next.decision).toMatchObject({ kind: 'routed', backendId: owner });
    await state.release('m', owner, 'turn-2');
  });

  it('places a cold prompt where a full scan does, and counts its lease exactly', async () => {
    const shortlisted = ctx.createState();
    const fullScan = ctx.createState({ shortlistAbove: Number.POSITIVE_INFINITY });
    for (let conversation = 1; conversation <= 20; conversation++) {
      const cold = inputOf(conversation, 10, `cold-${conversation}`);
      const a = await decide(shortlisted, cold);
      expect(a.decision.kind).toBe('routed');
      const chosen = a.decision.kind === 'routed' ? a.decision.backendId : '';
      await shortlisted.release('m', chosen, cold.leaseId);
      // The full scan of the same (idle) pool chooses the same backend: the first of the rendezvous order.
      const b = await decide(fullScan, { ...cold, leaseId: `full-${conversation}` });
      expect(b.decision).toMatchObject({ kind: 'routed', backendId: chosen });
      await fullScan.release('m', chosen, `full-${conversation}`);
    }
    const snapshot = await shortlisted.snapshot(
      'm',
      BACKENDS.map((backend) => backend.id),
      [],
    );
    expect([...snapshot.inflight.values()].reduce((sum, count) => sum + count, 0)).toBe(0);
  });

  it('reads ids of any length and any (non-control) characters out of the one ids argument', async () => {
    const state = ctx.createState();
    const backends = Array.from({ length: 60 }, (_, index) => ({
      id: index % 3 === 0 ? `bäckend-${'é'.repeat(index)}-${index}` : `b${index}`,
      weight: 1,
    }));
    const owner = (backends[45] as { id: string }).id;
    const turn = { ...inputOf(11, 20, 'x'), backends };
    await state.reserve('m', owner, 'turn-1', turn.request.blockHashes, 0);
    await state.release('m', owner, 'turn-1');
    const next = await decide(state, { ...inputOf(11, 24, 'turn-2'), backends });
    expect(next.decision).toMatchObject({ kind: 'routed', backendId: owner });
    // Every participant's figures belong to the backend named (its lease is where the decision says).
    expect(next.candidates.every((candidate) => backends.some((backend) => backend.id === candidate.backend.id))).toBe(
      true,
    );
    expect((await state.snapshot('m', [owner], [])).inflight.get(owner)).toBe(1);
  });

  it('decides over every backend up to the threshold (the cost rule over the whole pool)', async () => {
    const state = ctx.createState();
    const small = { ...inputOf(3, 8, 'small'), backends: BACKENDS.slice(0, DEFAULT_SHORTLIST.above) };
    const result = await decide(state, small);
    expect(result.candidates).toHaveLength(DEFAULT_SHORTLIST.above);
  });
});
