import type { BackendObservation, BackendState } from '@kvroute/protocols';
import { createCacheAwarePolicy, decide, type AtomicRule, type BlockHash, type DecideInput } from '@kvroute/routing';
import { startRedisCluster, uniqueKeyPrefix, type TestRedisCluster } from '@kvroute/testing';
import { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedisApiKeyStore } from '../../src/api-key-store';
import { RedisBackendSet, type BackendSetList } from '../../src/backend-set';
import { RedisBackendStateStore } from '../../src/backend-state-store';
import { clearPoolState } from '../../src/clear-pool-state';
import { createRedis, waitUntilReady, type RedisRole } from '../../src/connection';
import { backendStateKeys, poolKeys } from '../../src/keys';
import { RECORD_BLOCKS_PER_CALL } from '../../src/store-limits';
import { RedisRoutingState } from '../../src/redis-routing-state';
import { routeScriptOf } from '../../src/route-call';
import { RouterReplicas } from '../../src/router-replicas';
import { SCRIPTS, type LuaScript, type RedisClient } from '../../src/scripts';
import { TenantLimits } from '../../src/tenant-limits';

/**
 * The store on a real Redis Cluster (`startRedisCluster()`: 3 masters + 3 replicas of local redis-server,
 * a private one for this file): every script through `createRedis(redis+cluster://…)`, two pools whose
 * hash tags sit on different masters, pub/sub across nodes, and the same calls after the master of one
 * pool was killed and its replica promoted (which never saw a script: EVALSHA answers NOSCRIPT there,
 * and the EVAL fallback loads it). A MOVED, ASK or CROSSSLOT the client did not handle fails a call.
 */

/** route.lua composed with cacheaware's rule, the script these tests' decisions run. */
const costRouteScript = routeScriptOf(createCacheAwarePolicy().atomicRule as AtomicRule);

let cluster: TestRedisCluster;
const clients: RedisClient[] = [];
const namespace = uniqueKeyPrefix('redis-store-cluster');
/** Pool A and pool B: model names whose hash tags are served by two different masters (chosen in beforeAll). */
let pools: [string, string];

beforeAll(async () => {
  cluster = await startRedisCluster({ logger: () => undefined });
  const masterOfPool = (pool: string): number => cluster.masterOf(poolKeys(pool, namespace).prefix).port;
  const first = 'model-a';
  const other = Array.from({ length: 64 }, (_, index) => `model-${index}`).find(
    (pool) => masterOfPool(pool) !== masterOfPool(first),
  );
  if (other === undefined) throw new Error('no model name among 64 hashes to another master than model-a');
  pools = [first, other];
}, 40_000);

afterAll(async () => {
  for (const client of clients.splice(0)) client.disconnect();
  await cluster?.stop();
});

/** A cluster client of `role` (generous command timeout: the machine may be loaded), closed after the file. */
async function open(role: RedisRole): Promise<RedisClient> {
  const client = createRedis(cluster.url, role, { commandTimeoutMs: 2000 });
  clients.push(client);
  await waitUntilReady(client, 10_000);
  return client;
}

/** A plain connection to one node (its url), for looking at what that node holds. */
async function node(url: string): Promise<Redis> {
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, connectTimeout: 1000 });
  client.on('error', () => undefined);
  clients.push(client);
  await client.connect();
  return client;
}

function createState(redis: RedisClient): RedisRoutingState {
  return new RedisRoutingState({
    redis,
    maxBlocksPerPool: 100_000,
    blockIdleTtlMs: 60_000,
    leaseTtlMs: 30_000,
    nowMs: Date.now,
    keyNamespace: namespace,
  });
}

/** A chain longer than one call records, so record-ownership.lua runs too. */
const LONG_CHAIN: BlockHash[] = Array.from({ length: RECORD_BLOCKS_PER_CALL + 188 }, (_, index) => 1_000_000 + index);

const decideInput = (pool: string, leaseId: string): DecideInput => ({
  pool,
  request: {
    model: pool,
    blockHashes: [11, 12, 13, 14],
    blockSizeBytes: 256,
    textBytes: 1100,
    contextBlocks: 0,
    headHash: 7,
    sessionKey: null,
  },
  backends: [
    { id: 'a', weight: 1 },
    { id: 'b', weight: 1 },
  ],
  policy: createCacheAwarePolicy({ ownershipAt: 'routing' }),
  context: { nowMs: Date.now(), random: () => 0.5 },
  leaseId,
});

/** Every routing-state script on one pool; returns the backend the decision chose. */
async function exerciseRoutingState(state: RedisRoutingState, pool: string, tag: string): Promise<string> {
  const routed = await decide(state, decideInput(pool, `${tag}-routed`)); // route.lua, rule 'cost'
  expect(routed.decision.kind).toBe('routed');
  const chosen = routed.decision.kind === 'routed' ? routed.decision.backendId : '';
  expect(await state.reserve(pool, 'b', `${tag}-long`, LONG_CHAIN, 100)).toBe(true); // route.lua 'fixed' + record-ownership.lua
  const snapshot = await state.snapshot(pool, ['a', 'b'], LONG_CHAIN); // snapshot.lua
  expect(snapshot.matchBlocks.get('b')).toBe(LONG_CHAIN.length);
  expect(snapshot.pendingPrefillTokens.get('b')).toBe(100);
  expect(await state.renew(pool, 'b', `${tag}-long`)).toBe(true); // renew.lua
  await state.prefillDone(pool, 'b', `${tag}-long`, LONG_CHAIN); // prefill-done.lua
  const learned = await state.learn(pool, {
    correction: null,
    calibration: { bytesPerToken: { samples: 4, sum: 16 } },
  }); // learn.lua
  expect(learned.calibration.bytesPerToken?.value).toBe(4);
  await state.release(pool, 'b', `${tag}-long`); // release.lua
  await state.release(pool, chosen, `${tag}-routed`);
  await state.forgetBackend(pool, 'a'); // forget-backend.lua
  const after = await state.snapshot(pool, ['a', 'b'], LONG_CHAIN);
  expect(after.inflight).toEqual(
    new Map([
      ['a', 0],
      ['b', 0],
    ]),
  );
  expect(after.matchBlocks.get('b')).toBe(LONG_CHAIN.length);
  return chosen;
}

const observation = (running: number): BackendObservation => ({
  engine: 'vllm',
  failure: null,
  kvUsage: 0.25,
  kvCapacityTokens: 1024,
  running,
  waiting: 0,
  prefixCacheHitRate: 0.5,
  preemptionsTotal: 0,
  engineStartedAtMs: 1_796_165_945_615,
  loraAdapters: null,
});

let scrapedAt = 0;
/** One scrape of `backendId` whose observation differs from the last one's, so the script publishes it. */
function recordScrape(store: RedisBackendStateStore, backendId: string, running: number) {
  scrapedAt = Math.max(scrapedAt + 1, Date.now());
  return store.record(
    { backendId, healthPassed: true, observation: observation(running), scrapedAtMs: scrapedAt, carry: null },
    { failuresToUnhealthy: 1, successesToHealthy: 1, ttlMs: 60_000 },
  );
}

/** Polls `check` every 50 ms until it holds; fails with `what` after `timeoutMs`. */
async function eventually(what: string, check: () => Promise<boolean> | boolean, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe('the store on a Redis Cluster', () => {
  it('createRedis gives a Cluster client for a redis+cluster:// URL, and a single-server one otherwise', async () => {
    const client = await open('request-path');
    expect(client).toBeInstanceOf(Cluster);
    expect(cluster.url).toMatch(/^redis\+cluster:\/\/127\.0\.0\.1:\d+(,127\.0\.0\.1:\d+){2}$/);
    const single = createRedis(cluster.nodes[0]?.url as string, 'request-path', { overrides: { lazyConnect: true } });
    expect(single).toBeInstanceOf(Redis);
    single.disconnect();
  });

  it('runs every routing-state script for two pools on different masters, each pool in its own slot', async () => {
    const redis = await open('request-path');
    const state = createState(redis);
    const [poolA, poolB] = pools;
    const masterA = cluster.masterOf(poolKeys(poolA, namespace).prefix);
    const masterB = cluster.masterOf(poolKeys(poolB, namespace).prefix);
    expect(masterA.port).not.toBe(masterB.port);
    await Promise.all([exerciseRoutingState(state, poolA, 'a'), exerciseRoutingState(state, poolB, 'b')]);
    // Each pool's keys are on its own master; the other master redirects a plain client (what every
    // script of a single-server client got before createRedis made cluster clients).
    const [onA, onB] = await Promise.all([node(masterA.url), node(masterB.url)]);
    expect(await onA.exists(poolKeys(poolA, namespace).ownersNew)).toBe(1);
    expect(await onB.exists(poolKeys(poolB, namespace).ownersNew)).toBe(1);
    await expect(onA.exists(poolKeys(poolB, namespace).ownersNew)).rejects.toThrow(/^MOVED /);
    await expect(onB.exists(poolKeys(poolA, namespace).ownersNew)).rejects.toThrow(/^MOVED /);
    // clearPoolState scans every master, not just one node.
    expect(await clearPoolState(redis, namespace)).toBeGreaterThan(0);
    expect(await onA.exists(poolKeys(poolA, namespace).ownersNew)).toBe(0);
    expect(await onB.exists(poolKeys(poolB, namespace).ownersNew)).toBe(0);
  }, 20_000);

  it('runs the fleet, tenant and API-key scripts, MULTIs and pipelines (one hash tag each)', async () => {
    const redis = await open('request-path');
    const set = new RedisBackendSet({ redis, nowMs: Date.now, keyNamespace: namespace });
    await set.seed([{ id: 'sim-1', url: 'http://127.0.0.1:1', weight: 1 }]); // change-backend-set.lua
    await set.setDrained('sim-1', true);
    const list = await set.list(); // MULTI GET + HGETALL
    expect(list.backends.map((entry) => [entry.id, entry.drained])).toEqual([['sim-1', true]]);
    expect(await set.version()).toBe(list.version);

    const states = new RedisBackendStateStore({ redis, keyNamespace: namespace });
    await recordScrape(states, 'sim-1', 1); // record-backend-scrape.lua
    await recordScrape(states, 'sim-2', 2);
    expect((await states.readAll()).map((state) => [state.backendId, state.running])).toEqual([
      ['sim-1', 1],
      ['sim-2', 2],
    ]); // ZRANGE, then a pipeline of HGETs

    const limits = new TenantLimits({ redis, keyNamespace: namespace });
    const admission = {
      tenant: 'acme',
      keyId: 'k1',
      leaseId: 'l1',
      nowMs: Date.now(),
      leaseTtlMs: 30_000,
      rates: [{ scope: 'key', unit: 'tokens', limit: 1000, periodMs: 60_000 }] as const,
      reservedTokens: 100,
      concurrency: { tenant: 2, key: 1 },
    };
    expect((await limits.admit(admission)).admitted).toBe(true); // admit-tenant.lua
    expect((await limits.admit({ ...admission, leaseId: 'l2' })).admitted).toBe(false); // the key's concurrency cap
    expect(await limits.renew(admission)).toBe(2); // settle-tenant.lua
    expect(await limits.release({ ...admission, usedTokens: 40 })).toBe(2);

    const apiKeys = new RedisApiKeyStore({ redis, keyNamespace: namespace });
    const digest = 'ab'.repeat(32);
    expect(await apiKeys.add('key-1', digest, '{"id":"key-1"}')).toBe(true); // change-api-keys.lua
    expect(await apiKeys.lookup(digest)).toBe('{"id":"key-1"}');
    expect(await apiKeys.revoke('key-1')).toBe(true);

    const replicas = new RouterReplicas({ redis, replicaId: 'replica-1', staleAfterMs: 6000, keyNamespace: namespace });
    expect(await replicas.heartbeat(Date.now())).toBe(1); // MULTI on one key
    await replicas.leave();
  }, 20_000);

  it('delivers what the scripts PUBLISH to cluster subscribers, whatever node each listens on', async () => {
    const redis = await open('request-path');
    const states = new RedisBackendStateStore({ redis, keyNamespace: namespace });
    const received: BackendState[] = [];
    const subscription = states.subscribe({
      subscriber: await open('worker'),
      onState: (state) => received.push(state),
    });
    expect(await subscription.ready).toBe(true);

    // The premise of classic pub/sub on a cluster: a message published on the channel's master reaches
    // a client subscribed on any other node (Redis forwards it over the cluster bus).
    const channel = backendStateKeys(namespace).changes;
    const publisherPort = cluster.masterOf(backendStateKeys(namespace).index).port;
    const elsewhere = cluster.nodes.find((candidate) => candidate.port !== publisherPort && candidate.running);
    const plain = await node(elsewhere?.url as string);
    const heardElsewhere: string[] = [];
    plain.on('message', (from: string, message: string) => from === channel && heardElsewhere.push(message));
    await plain.subscribe(channel);

    await recordScrape(states, 'pubsub-1', 7);
    await eventually(
      'the state reached the cluster subscriber',
      () => received.some((state) => state.backendId === 'pubsub-1' && state.running === 7),
      5_000,
    );
    await eventually('the state reached a subscriber on another node', () => heardElsewhere.length > 0, 5_000);

    // The backend set's watch with its poll out of the way: only the change notice can deliver.
    const set = new RedisBackendSet({ redis, nowMs: Date.now, keyNamespace: namespace });
    const lists: BackendSetList[] = [];
    const watch = set.watch({
      subscriber: await open('worker'),
      pollIntervalMs: 60_000,
      onChange: (list) => lists.push(list),
    });
    try {
      await new Promise((resolve) => setTimeout(resolve, 200)); // the SUBSCRIBE is under way
      const change = await set.add({ id: 'pubsub-backend', url: 'http://127.0.0.1:2', weight: 1 });
      await eventually(
        'the change notice reached the watch',
        () => lists.some((list) => list.version === change.version),
        5_000,
      );
    } finally {
      await watch.stop();
      await subscription.stop();
    }
  }, 20_000);

  it("works again after a pool's master is killed and its replica promoted: the scripts are reloaded there", async () => {
    const [poolA, poolB] = pools;
    const requestPath = await open('request-path');
    const state = createState(requestPath);
    const states = new RedisBackendStateStore({ redis: requestPath, keyNamespace: namespace });
    const received: BackendState[] = [];
    const subscription = states.subscribe({
      subscriber: await open('worker'),
      onState: (published) => received.push(published),
    });
    expect(await subscription.ready).toBe(true);

    // State recorded before the failover, and on the replica before the kill (WAIT), so it survives it.
    expect(await state.reserve(poolA, 'a', 'before', LONG_CHAIN, 0)).toBe(true);
    await state.release(poolA, 'a', 'before');
    const oldMaster = cluster.masterOf(poolKeys(poolA, namespace).prefix);
    expect(await (await node(oldMaster.url)).wait(1, 2000)).toBe(1);

    await cluster.killNode(oldMaster.port);
    await cluster.waitForClusterOk(20_000);
    const newMaster = cluster.masterOf(poolKeys(poolA, namespace).prefix);
    expect(newMaster.port).not.toBe(oldMaster.port);
    const promoted = await node(newMaster.url);
    // Scripts replicate as their effects, so the promoted replica has never cached one; a Redis Function's
    // library replicates itself (FUNCTION LOAD is propagated): release.lua's, loaded before the kill, is there.
    expect(await promoted.script('EXISTS', SCRIPTS.snapshot.sha1)).toEqual([0]);
    const libraryOn = async (script: LuaScript): Promise<number> =>
      ((await promoted.call('FUNCTION', ['LIST', 'LIBRARYNAME', script.asFunction?.name ?? 'none'])) as unknown[])
        .length;
    expect(await libraryOn(SCRIPTS.release)).toBe(1);

    // The client learns the new slot map from a MOVED or its refresh: calls may fail for a moment, not longer.
    const started = Date.now();
    await eventually(
      'snapshot on the promoted master',
      () =>
        state.snapshot(poolA, ['a'], LONG_CHAIN).then(
          () => true,
          () => false,
        ),
      10_000,
    );
    const recoveredMs = Date.now() - started;
    console.info(
      `cluster failover: master ${oldMaster.port} killed, ${newMaster.port} promoted; the store's calls worked again after ${recoveredMs} ms`,
    );
    const after = await state.snapshot(poolA, ['a', 'b'], LONG_CHAIN);
    expect(after.matchBlocks.get('a')).toBe(LONG_CHAIN.length); // replicated before the kill
    await exerciseRoutingState(state, poolA, 'a-after');
    await exerciseRoutingState(state, poolB, 'b-after');
    expect(await promoted.script('EXISTS', SCRIPTS.snapshot.sha1)).toEqual([1]); // loaded by the EVAL fallback
    // Run there as a function (replicated, or loaded when found missing), not left to EVALSHA by a failed load.
    expect(await libraryOn(costRouteScript)).toBe(1);
    expect(recoveredMs).toBeLessThan(10_000);

    // Pub/sub still delivers (the subscriber moves to another node if its own was the one killed).
    let running = 100;
    await eventually(
      'a state published after the failover',
      async () => {
        running += 1;
        await recordScrape(states, 'after-failover', running).catch(() => undefined);
        await new Promise((resolve) => setTimeout(resolve, 100));
        return received.some((published) => published.backendId === 'after-failover');
      },
      10_000,
    );
    await subscription.stop();
  }, 40_000);
});
