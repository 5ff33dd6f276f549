import {
  createCacheAwarePolicy,
  type AtomicRule,
  decide,
  estimatePrefillTokens,
  PREFILL_TOKENS_LUA,
  type BackendInfo,
  type DecideInput,
  type EngineLoad,
  type RoutingRequest,
} from '@kvroute/routing';
import { seededRandom } from '@kvroute/workloads';
import type { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { poolKeys } from '../../src/keys';
import { MEMBER_SET_TTL_MS } from '../../src/pool-members';
import { routeScriptOf } from '../../src/route-call';
import { preloadScript } from '../../src/scripts';
import { openRedisTestContext, type RedisTestContext } from './redis-test-context';

/**
 * What a decision call carries (route.lua, issue 28): its candidates by the version of their member
 * set, stored once in the pool's slot; the engines' figures only when they changed; and so at 1,024
 * backends a few KB, where the candidates' records alone were ~40 KB.
 */

let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-decision-call' });
});
beforeEach(async () => {
  ctx.beginTest('call');
  // Loaded beforehand, so no call below is answered NOSCRIPT or "Function not found" and sent again.
  await preloadScript(ctx.redis, routeScriptOf(createCacheAwarePolicy().atomicRule as AtomicRule));
});
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

/** A route call's argv as the client sent it (after EVALSHA's sha and key count: keys, then arguments). */
interface SentCall {
  readonly keys: string[];
  readonly args: string[];
}

/** The test's Redis with every route call's keys and arguments recorded. */
function recording(redis: Redis): { redis: Redis; calls: SentCall[] } {
  const calls: SentCall[] = [];
  const proxy = new Proxy(redis, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver) as unknown;
      if (name !== 'callBuffer' || typeof value !== 'function') return value;
      return (command: string, argv: (string | number)[]) => {
        const keyCount = Number(argv[1]);
        calls.push({
          keys: argv.slice(2, 2 + keyCount).map(String),
          args: argv.slice(2 + keyCount).map(String),
        });
        return (value as (...a: unknown[]) => unknown).call(target, command, argv);
      };
    },
  });
  return { redis: proxy, calls };
}

/** route.lua's ARGV positions (its header). */
const ARG = { blocks: 7, ruleArgument: 9, members: 11, engine: 13 } as const;

function backendsOf(count: number): BackendInfo[] {
  return Array.from({ length: count }, (_, i) => ({ id: `10.2.${i >> 8}.${i & 255}:8000`, weight: 1 }));
}

function requestOf(blocks: number, seed: number): RoutingRequest {
  return {
    model: 'm',
    blockHashes: Array.from({ length: blocks }, (_, i) => 7_000_000 * seed + i),
    blockSizeBytes: 256,
    textBytes: blocks * 256 + 10,
    contextBlocks: blocks - 1,
    headHash: 1_000 + seed,
    sessionKey: null,
  };
}

function inputOf(
  backends: readonly BackendInfo[],
  request: RoutingRequest,
  leaseId: string,
  engine?: Map<string, EngineLoad>,
): DecideInput {
  return {
    pool: 'm',
    request,
    backends,
    policy: createCacheAwarePolicy(),
    context: { nowMs: 0, random: () => 0.5 },
    leaseId,
    ...(engine === undefined ? {} : { engine }),
  };
}

describe('member sets', () => {
  it('are stored once per version, named by later calls, and sent again only when Redis lost them', async () => {
    const { redis, calls } = recording(ctx.redis as Redis);
    const state = ctx.createState({ redis });
    const backends = backendsOf(8);
    const keys = poolKeys('m', ctx.namespace);

    await decide(state, inputOf(backends, requestOf(4, 1), 'l1'));
    expect(calls).toHaveLength(1);
    const first = calls[0] as SentCall;
    expect(first.args[ARG.members]).toBe(backends.map((backend) => `${backend.id}\t1\n`).join(''));
    const membersKey = first.keys[7] as string;
    expect(membersKey.startsWith(`${keys.prefix}members:`)).toBe(true);
    expect(await ctx.redis.hget(membersKey, 'n')).toBe('8');
    expect(await ctx.redis.hget(membersKey, `@${backends[5]?.id}`)).toBe('6');
    const ttl = await ctx.redis.pttl(membersKey);
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(MEMBER_SET_TTL_MS);

    // Later decisions name the stored set.
    await decide(state, inputOf(backends, requestOf(4, 2), 'l2'));
    expect(calls).toHaveLength(2);
    expect(calls[1]?.args[ARG.members]).toBe('');
    expect(calls[1]?.keys[7]).toBe(membersKey);

    // Redis lost it: the call says so, changes nothing, and the store calls again with the set.
    await ctx.redis.del(membersKey);
    const leasesBefore = await ctx.redis.zcard(keys.leaseDeadlines);
    const result = await decide(state, inputOf(backends, requestOf(4, 3), 'l3'));
    expect(result.decision.kind).toBe('routed');
    expect(calls).toHaveLength(4);
    expect(calls[2]?.args[ARG.members]).toBe('');
    expect(calls[3]?.args[ARG.members]).not.toBe('');
    expect(await ctx.redis.zcard(keys.leaseDeadlines)).toBe(leasesBefore + 1);

    // A set stored by an earlier release (no 'ids': the whole set a decision over every member reads) counts as
    // lost: stored again, with its members in configuration order and their weights.
    await ctx.redis.hdel(membersKey, 'ids', 'weights');
    await decide(state, inputOf(backends, requestOf(4, 7), 'l5'));
    expect(calls).toHaveLength(6);
    expect(calls[4]?.args[ARG.members]).toBe('');
    expect(calls[5]?.args[ARG.members]).not.toBe('');
    expect(await ctx.redis.hget(membersKey, 'ids')).toBe(backends.map((backend) => `${backend.id}\n`).join(''));
    expect(await ctx.redis.hget(membersKey, 'weights')).toBe('');
    calls.splice(4, 2);

    // Another eligible set (a backend out: its breaker open here) is another version, stored by its first call.
    await decide(state, inputOf(backends.slice(1), requestOf(4, 4), 'l4'));
    expect(calls[4]?.keys[7]).not.toBe(membersKey);
    expect(calls[4]?.args[ARG.members]).not.toBe('');
    expect(await ctx.redis.hget(calls[4]?.keys[7] as string, 'n')).toBe('7');
    // Weights other than 1 are kept per member.
    const weighted = backends.map((backend, i) => ({ ...backend, weight: i === 2 ? 2.5 : 1 }));
    await decide(state, inputOf(weighted, requestOf(4, 8), 'l6'));
    expect(await ctx.redis.hget(calls[5]?.keys[7] as string, 'weights')).toBe(
      weighted.map((backend) => `${backend.weight}\n`).join(''),
    );
    // A second replica with the first set finds it stored: it sends it once (it cannot know), then names it.
    const other = recording(ctx.redis as Redis);
    const replica = ctx.createState({ redis: other.redis });
    await decide(replica, inputOf(backends, requestOf(4, 5), 'r1'));
    await decide(replica, inputOf(backends, requestOf(4, 6), 'r2'));
    expect(other.calls.map((call) => call.keys[7])).toEqual([membersKey, membersKey]);
    expect(other.calls[1]?.args[ARG.members]).toBe('');
  });
});

describe('engine figures', () => {
  it('live in the pool slot, sent by a call only when its replica saw them change', async () => {
    const { redis, calls } = recording(ctx.redis as Redis);
    const state = ctx.createState({ redis });
    const backends = backendsOf(3);
    const keys = poolKeys('m', ctx.namespace);
    const load = (waiting: number, kvUsage: number): EngineLoad => ({
      kvUsage,
      kvCapacityTokens: 10_000,
      running: 1,
      waiting,
    });
    const engine = new Map<string, EngineLoad>([
      [backends[0]?.id as string, load(3, 0.5)],
      [backends[1]?.id as string, load(40, 0.25)],
    ]);
    await decide(state, inputOf(backends, requestOf(2, 1), 'l1', engine));
    // 6-bit digits from '0' (48), waiting in 3, free tokens + 1 in 5 (unknown: all '0'): 3 waiting and 5,000
    // free (5,001 = 1·64² + 14·64 + 9: '1', '>', '9'); 40 ('X') and 7,500 (7,501 = 1·64² + 53·64 + 13); unknown.
    expect(await ctx.redis.hgetall(keys.engine)).toEqual({
      [backends[0]?.id as string]: '003001>9',
      [backends[1]?.id as string]: '00X001e=',
      [backends[2]?.id as string]: '00000000',
    });
    await decide(state, inputOf(backends, requestOf(2, 2), 'l2', engine));
    expect(calls[1]?.args[ARG.engine]).toBe('');
    // A poller update for one backend: only its figures go out.
    engine.set(backends[1]?.id as string, load(0, 0.99));
    await decide(state, inputOf(backends, requestOf(2, 3), 'l3', engine));
    expect(calls[2]?.args[ARG.engine]).toBe(`${backends[1]?.id}\t0000001U\n`);
    // Its state went stale (the router dropped it): sent as unknown.
    engine.delete(backends[0]?.id as string);
    await decide(state, inputOf(backends, requestOf(2, 4), 'l4', engine));
    expect(calls[3]?.args[ARG.engine]).toBe(`${backends[0]?.id}\t00000000\n`);
    // A forgotten backend (removed, restarted) leaves no figures behind, and the next call sends its figures again.
    await state.forgetBackend('m', backends[1]?.id as string);
    expect(await ctx.redis.hexists(keys.engine, backends[1]?.id as string)).toBe(0);
    await decide(state, inputOf(backends, requestOf(2, 5), 'l5', engine));
    expect(calls[4]?.args[ARG.engine]).toBe(`${backends[1]?.id}\t0000001U\n`);
    expect(await ctx.redis.hget(keys.engine, backends[1]?.id as string)).toBe('0000001U');
  });
});

describe("a decision's explanation", () => {
  it("shows the engine figures the rule saw: those another replica stored, not this replica's older ones", async () => {
    const backends = backendsOf(2);
    const idle: EngineLoad = { kvUsage: 0.1, kvCapacityTokens: 10_000, running: 0, waiting: 0 };
    const queued: EngineLoad = { ...idle, waiting: 30 };
    const stale = new Map([[backends[0]?.id as string, idle]]);
    const fresh = new Map([[backends[0]?.id as string, queued]]);
    const behind = ctx.createState();
    const ahead = ctx.createState();
    await decide(behind, inputOf(backends, requestOf(2, 1), 'b1', stale));
    await decide(ahead, inputOf(backends, requestOf(2, 2), 'a1', fresh));
    for (const linesFromStore of [false, true]) {
      const input = inputOf(backends, requestOf(2, 3), `b-${linesFromStore}`, stale);
      const result = await decide(behind, { ...input, policy: createCacheAwarePolicy({}, { linesFromStore }) });
      if (result.decision.kind !== 'routed') throw new Error(`not routed: ${result.decision.kind}`);
      const score = result.decision.scores.find((entry) => entry.backendId === backends[0]?.id);
      // engineWaitingMs is 40 by default: 30 waiting, as the other replica saw them.
      expect(score?.parts?.['waitingMs'], `lines from the store: ${linesFromStore}`).toBe(30 * 40);
      // The candidate itself still carries what this replica knows.
      expect(result.candidates.find((c) => c.backend.id === backends[0]?.id)?.engine).toBe(idle);
    }
  });
});

describe('an engine field that is not one', () => {
  it('reads as unknown on both sides: the decision is made and explained, not refused after its lease', async () => {
    const backends = backendsOf(2);
    const state = ctx.createState();
    const keys = poolKeys('m', ctx.namespace);
    await decide(state, inputOf(backends, requestOf(2, 1), 'e1'));
    for (const field of ['zz', '0 12', 'ppppppppp']) {
      await ctx.redis.hset(keys.engine, backends[0]?.id as string, field);
      const result = await decide(state, inputOf(backends, requestOf(2, 2), `e-${field}`));
      if (result.decision.kind !== 'routed') throw new Error(`not routed with ${JSON.stringify(field)}`);
      const score = result.decision.scores.find((entry) => entry.backendId === backends[0]?.id);
      expect(score?.parts?.['waitingMs'], field).toBe(0);
      expect(score?.parts?.['kvMs'], field).toBe(0);
    }
  });
});

describe('the size of a decision call', () => {
  it('is at most 4 KB of arguments at 1,024 backends (an 8k-token prompt), where the records were ~40 KB', async () => {
    const { redis, calls } = recording(ctx.redis as Redis);
    const state = ctx.createState({ redis });
    const backends = backendsOf(1024);
    const engine = new Map(
      backends.map((backend, i) => [
        backend.id,
        { kvUsage: (i % 90) / 100, kvCapacityTokens: 100_000, running: 2, waiting: i % 5 },
      ]),
    );
    await decide(state, inputOf(backends, requestOf(128, 1), 'first', engine));
    // Engine figures went out over the first calls (128 each); measure once they are all sent.
    for (let k = 0; k < 10; k++) await decide(state, inputOf(backends, requestOf(128, 2 + k), `warm-${k}`, engine));
    calls.length = 0;
    await decide(state, inputOf(backends, requestOf(128, 20), 'measured', engine));
    expect(calls).toHaveLength(1);
    const call = calls[0] as SentCall;
    const bytes = [...call.keys, ...call.args].reduce((sum, arg) => sum + Buffer.byteLength(arg), 0);
    expect(call.args[ARG.members]).toBe('');
    expect(call.args[ARG.blocks]).toHaveLength(128 * 17);
    expect(bytes).toBeLessThanOrEqual(4096);
  });
});

describe('the prefill formula, once per language', () => {
  it('gives the same tokens in Lua (prefill-tokens.lua) as estimatePrefillTokens', async () => {
    const random = seededRandom(28);
    const script = `${PREFILL_TOKENS_LUA}\nreturn prefillTokens(tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))`;
    for (let k = 0; k < 300; k++) {
      const blockSizeBytes = [16, 64, 256, 1000][k % 4] as number;
      const depth = Math.floor(random() * 200);
      const textBytes = Math.floor(random() * 60_000);
      const bytesPerToken = [4, 3.3, 1, 0.7, 2.25][Math.floor(random() * 5)] as number;
      const request = { ...requestOf(0, k), textBytes, blockSizeBytes };
      const lua = await ctx.redis.eval(script, 0, textBytes, blockSizeBytes, depth, bytesPerToken);
      expect(lua, `${textBytes} ${blockSizeBytes} ${depth} ${bytesPerToken}`).toBe(
        estimatePrefillTokens(request, depth, bytesPerToken),
      );
    }
  });
});
