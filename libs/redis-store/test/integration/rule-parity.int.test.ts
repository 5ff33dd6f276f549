import { seededRandom } from '@kvroute/workloads';
import {
  createCacheAwarePolicy,
  createLeastLoadedPolicy,
  decide,
  type BackendInfo,
  type CacheAwareParams,
  type EngineLoad,
  type RoutingPolicy,
  type RoutingRequest,
} from '@kvroute/routing';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { poolKeys } from '../../src/keys';
import { openRedisTestContext, type RedisTestContext } from './redis-test-context';

/**
 * route.lua evaluates the rule of the policies with an atomic rule, and the decision is built from
 * what it returned (the policy's `choose` does not run): it must be exactly the decision `choose`
 * makes on the same figures. Each case plants random figures (in-flight, backlog, match depths)
 * straight into the pool's keys, and random engine figures (the health poller's, passed in as the
 * router does), lets `decide` route on the store, and checks that the script read the planted figures
 * and that its decision equals `choose`'s on them: chosen backend, reason, every score and part,
 * exclusions, in-flight cap. Figures are drawn to make ties, valve and guard exclusions, cold prompts
 * and zero-cost parameters common.
 */

let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-parity' });
});
beforeEach(() => ctx.beginTest('parity'));
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

interface Case {
  backends: BackendInfo[];
  inflight: number[];
  pending: number[];
  depths: number[];
  /** The engines' own figures (health poller), null = unknown. */
  engines: (EngineLoad | null)[];
  request: RoutingRequest;
}

const BLOCK_SIZE = 256;

function drawCase(random: () => number, index: number): Case {
  const pick = <T>(values: readonly T[]): T => values[Math.floor(random() * values.length)] as T;
  const count = 1 + Math.floor(random() * 8);
  const blocks = pick([0, 1, 3, 12, 40]);
  const backends = Array.from({ length: count }, (_, j) => ({
    id: `10.0.${index % 256}.${j}:8000`,
    weight: pick([1, 1, 1, 0.5, 2, 3]),
  }));
  const request: RoutingRequest = {
    model: 'm',
    blockHashes: Array.from({ length: blocks }, (_, i) => 1_000_000 * (index + 1) + i),
    blockSizeBytes: BLOCK_SIZE,
    textBytes: blocks * BLOCK_SIZE + Math.floor(random() * BLOCK_SIZE),
    contextBlocks: 0,
    headHash: Math.floor(random() * 2 ** 53),
    sessionKey: null,
    maxTokens: pick([null, 16, 500, 4000]),
    // A LoRA adapter's request now and then: its wait per backend (0 where it runs).
    adapterWaitMs:
      random() < 0.7 ? null : new Map(backends.map((backend) => [backend.id, pick([0, 0, 12.5, 200, 600])])),
  };
  return {
    backends,
    inflight: backends.map(() => pick([0, 0, 1, 2, 3, 4, 6, 9, 14])),
    pending: backends.map(() => pick([0, 0, 0, 500, 1200, 8000])),
    depths: backends.map(() =>
      blocks === 0 || random() < 0.4 ? 0 : pick([blocks, Math.floor(random() * (blocks + 1))]),
    ),
    engines: backends.map(() =>
      random() < 0.3
        ? null
        : {
            kvUsage: pick([0, 0.5, 0.9, 0.97, 0.99, 1, null]),
            kvCapacityTokens: pick([null, 2000, 20_000, 123_457]),
            running: pick([0, 3]),
            waiting: pick([0, 0, 1, 4, 30]),
          },
    ),
    request,
  };
}

function drawParams(random: () => number): Partial<CacheAwareParams> {
  const pick = <T>(values: readonly T[]): T => values[Math.floor(random() * values.length)] as T;
  return {
    bytesPerToken: pick([4, 3.3, 1]),
    prefillMsPerToken: pick([0.07, 0, 0.013, 0.2]),
    prefillWorkWeight: pick([0, 1, 2.5]),
    queueMsPerRequest: pick([5, 0, 1.5, 40]),
    minMatchBlocks: pick([1, 0, 2]),
    saturationInflight: pick([0, 0, 2, 4, 8]),
    spreadAbs: pick([8, 0, 2, 1.5]),
    spreadRel: pick([2, 1, 1.25, 3]),
    coldLoadFactor: pick([1.25, 1, 2]),
    engineWaitingMs: pick([40, 0, 7.5]),
    kvFullMs: pick([250, 0, 1000]),
  };
}

/** Writes a case's figures where route.lua reads them (format: src/lua/lib/owner-index.lua). */
async function plant(pool: string, c: Case, recordedAtMs: number): Promise<void> {
  const keys = poolKeys(pool, ctx.namespace);
  const write = ctx.redis.multi();
  c.backends.forEach((backend, j) => {
    if ((c.inflight[j] as number) > 0) write.hset(keys.inflight, backend.id, c.inflight[j] as number);
    if ((c.pending[j] as number) > 0) write.hset(keys.pending, backend.id, c.pending[j] as number);
  });
  c.request.blockHashes.forEach((hash, i) => {
    const owners = c.backends
      .filter((_, j) => (c.depths[j] as number) > i)
      .map((backend) => `\x01${backend.id}\x02${recordedAtMs}`)
      .join('');
    if (owners !== '') write.hset(keys.ownersNew, String(hash), owners);
  });
  await write.exec();
}

async function checkParity(
  policyOf: (random: () => number) => RoutingPolicy,
  cases: number,
  seed: number,
): Promise<Record<string, number>> {
  const random = seededRandom(seed);
  const now = Date.now();
  const state = ctx.createState({ nowMs: () => now });
  const reasons: Record<string, number> = {};
  for (let index = 0; index < cases; index++) {
    const c = drawCase(random, index);
    const policy = policyOf(random);
    const pool = `pool-${index}`;
    await plant(pool, c, now - 1);
    const engine = new Map(
      c.backends.flatMap((backend, j) => (c.engines[j] ? [[backend.id, c.engines[j]] as const] : [])),
    );
    const context = { nowMs: now, random };
    const result = await decide(state, {
      pool,
      request: c.request,
      backends: c.backends,
      policy,
      context,
      leaseId: `lease-${index}`,
      engine,
    });
    const where = `seed ${seed}, case ${index}`;
    expect(result.decision, where).toStrictEqual(policy.choose(c.request, result.candidates, context));
    expect(
      result.candidates.map((candidate) => candidate.inflight),
      where,
    ).toEqual(c.inflight);
    expect(
      result.candidates.map((candidate) => candidate.pendingPrefillTokens),
      where,
    ).toEqual(c.pending);
    expect(
      result.candidates.map((candidate) => candidate.matchBlocks),
      where,
    ).toEqual(policy.usesPrefixMatch ? c.depths : c.depths.map(() => 0));
    if (result.decision.kind === 'routed') reasons[result.decision.reason] = (reasons[result.decision.reason] ?? 0) + 1;
  }
  return reasons;
}

describe('route.lua rules choose what the policies choose', () => {
  it('cacheaware, the cost lines cost.lua computed: 1 500 random cases, every reason reached', async () => {
    const reasons = await checkParity(
      (random) => createCacheAwarePolicy(drawParams(random), { linesFromStore: true }),
      1500,
      42,
    );
    // The cases reach every branch of the rule.
    for (const reason of ['prefix-affinity', 'spilled-from-saturated', 'least-loaded', 'load-guard', 'cold-hash']) {
      expect(reasons[reason] ?? 0, `${reason} in ${JSON.stringify(reasons)}`).toBeGreaterThan(10);
    }
  });

  it('cacheaware as routers run it (the cost lines recomputed from the figures read): 500 random cases', async () => {
    const reasons = await checkParity((random) => createCacheAwarePolicy(drawParams(random)), 500, 43);
    expect(Object.keys(reasons).length, JSON.stringify(reasons)).toBe(5);
  });

  it("cacheaware in a big pool (a shortlist): the recomputed lines equal the Lua twin's, cold placements included", async () => {
    // Past RANKED_BACKENDS the Lua twin ranks by position, where the TypeScript rule ranks by the full rendezvous
    // order: a cold placement's explanation must still show the order the choice was made in.
    const random = seededRandom(44);
    const now = Date.now();
    let cold = 0;
    for (let index = 0; index < 40; index++) {
      const c = drawCase(random, index);
      const count = 40 + Math.floor(random() * 40);
      const backends = Array.from({ length: count }, (_, j) => ({ id: `10.1.${index}.${j}:8000`, weight: 1 }));
      const big: Case = {
        ...c,
        backends,
        inflight: backends.map(() => Math.floor(random() * 6)),
        pending: backends.map(() => 0),
        depths: backends.map(() => (random() < 0.8 ? 0 : c.request.blockHashes.length)),
        engines: backends.map(() => null),
        request: { ...c.request, adapterWaitMs: null },
      };
      const params = { ...drawParams(random), minMatchBlocks: 1, saturationInflight: 0 };
      const decisions = [];
      for (const linesFromStore of [true, false]) {
        const pool = `big-${index}-${linesFromStore}`;
        await plant(pool, big, now - 1);
        const result = await decide(ctx.createState({ nowMs: () => now }), {
          pool,
          request: big.request,
          backends,
          policy: createCacheAwarePolicy(params, { linesFromStore }),
          context: { nowMs: now, random },
          leaseId: `lease-${index}`,
        });
        decisions.push(result.decision);
      }
      expect(decisions[1], `case ${index}`).toStrictEqual(decisions[0]);
      if (decisions[0]?.kind === 'routed' && decisions[0].reason === 'cold-hash') cold++;
    }
    expect(cold).toBeGreaterThan(5);
  });

  it('leastloaded: 300 random cases', async () => {
    const reasons = await checkParity(() => createLeastLoadedPolicy(), 300, 7);
    expect(reasons['least-loaded']).toBe(300);
  });
});
