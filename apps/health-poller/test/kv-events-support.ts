import { createRedis, KvEventsIndex, KvEventsLeases, RedisRoutingState, waitUntilReady } from '@kvroute/redis-store';
import { hashTokenBlock53, TOKEN_CHAIN_ROOT, tokenBlockExtra } from '@kvroute/routing';
import { startRedis, uniqueKeyPrefix, type TestRedis } from '@kvroute/testing';
import { KvEventsIndexer } from '../src/kv-events/indexer';
import type { RankStream } from '../src/kv-events/endpoints';
import { PollerMetrics } from '../src/poller-metrics';

/** A chain of `blocks` blocks of 16 token ids from `seed`, its engine hashes (u64 above 2^63) and router names. */
export interface TokenChain {
  readonly tokens: number[];
  readonly hashes: bigint[];
  readonly names: number[];
}

export const BLOCK = 16;

export function tokenChain(seed: number, blocks: number, loraName: string | null = null): TokenChain {
  const tokens = Array.from({ length: blocks * BLOCK }, (_, i) => (seed * 7919 + i * 31) % 150_000);
  const hashes = Array.from({ length: blocks }, (_, i) => 0x8000_0000_0000_0000n + BigInt(seed) * 100_000n + BigInt(i));
  const names: number[] = [];
  const extra = tokenBlockExtra(loraName, null, false);
  let previous = TOKEN_CHAIN_ROOT;
  for (let i = 0; i < blocks; i++) {
    previous = hashTokenBlock53(tokens, i * BLOCK, BLOCK, previous, extra);
    names.push(previous);
  }
  return { tokens, hashes, names };
}

export interface IndexerOverrides {
  leaseTtlMs?: number;
  maxBatchEvents?: number;
  maxBatchBytes?: number;
  replayTimeoutMs?: number;
  /** The indexer's clock (default Date.now). */
  nowMs?: () => number;
  /** Wraps the replica's real leases (a delegate that delays calls: a Redis stall). */
  wrapLeases?: (leases: KvEventsLeases) => KvEventsLeases;
}

/** A test's Redis, namespace, routing-state reader and indexer replicas (real sockets, real Redis). */
export interface IndexerEnv {
  readonly redis: TestRedis;
  /** The current test's key namespace: replicas of earlier tests keep running on theirs, unseen. */
  readonly namespace: string;
  readonly state: RedisRoutingState;
  beginTest(label: string): void;
  /** A poller replica's indexer over `streams`, with its own metrics. */
  startIndexer(
    replicaId: string,
    streams: readonly RankStream[],
    overrides?: IndexerOverrides,
  ): { indexer: KvEventsIndexer; metrics: PollerMetrics };
  /** How many leading blocks of `names` the rank holds, as a router's snapshot sees it. */
  depth(pool: string, rankId: string, names: readonly number[]): Promise<number>;
  /** Another replica's leases in the current namespace (who holds what). */
  leases(replicaId: string, leaseTtlMs?: number): KvEventsLeases;
  close(): Promise<void>;
}

export async function openIndexerEnv(label: string): Promise<IndexerEnv> {
  const redis = await startRedis({ fresh: false, logger: () => undefined });
  const client = createRedis(redis.url, 'worker');
  await waitUntilReady(client);
  const stores = (namespace: string) => ({
    namespace,
    state: new RedisRoutingState({
      redis: client,
      maxBlocksPerPool: 100_000,
      blockIdleTtlMs: 60_000,
      leaseTtlMs: 10_000,
      nowMs: Date.now,
      keyNamespace: namespace,
    }),
    index: new KvEventsIndex({
      redis: client,
      nowMs: Date.now,
      blockIdleTtlMs: 60_000,
      maxBlocksPerPool: 100_000,
      keyNamespace: namespace,
    }),
  });
  let current = stores(uniqueKeyPrefix(label));
  const indexers: KvEventsIndexer[] = [];
  return {
    redis,
    get namespace() {
      return current.namespace;
    },
    get state() {
      return current.state;
    },
    beginTest(test) {
      current = stores(uniqueKeyPrefix(`${label}-${test}`));
    },
    startIndexer(replicaId, streams, overrides = {}) {
      const { namespace, index } = current;
      const metrics = new PollerMetrics({ backends: () => 0 });
      const leaseTtlMs = overrides.leaseTtlMs ?? 600;
      const leases = new KvEventsLeases({ redis: client, replicaId, leaseTtlMs, keyNamespace: namespace });
      const indexer = new KvEventsIndexer({
        replicaId,
        leases: overrides.wrapLeases?.(leases) ?? leases,
        apply: (pool, rankId, batch) => index.apply(pool, rankId, batch),
        nowMs: overrides.nowMs ?? Date.now,
        leaseTtlMs,
        topic: '',
        limits: {
          maxBatchEvents: overrides.maxBatchEvents ?? 64,
          maxBatchBlocks: 4096,
          maxBatchBytes: overrides.maxBatchBytes ?? 1 << 20,
        },
        maxQueuedBatches: 100,
        replayTimeoutMs: overrides.replayTimeoutMs ?? 1000,
        namesPerRank: 10_000,
        metrics,
      });
      indexer.setStreams(streams);
      indexer.start();
      indexers.push(indexer);
      return { indexer, metrics };
    },
    leases(replicaId, leaseTtlMs = 600) {
      return new KvEventsLeases({ redis: client, replicaId, leaseTtlMs, keyNamespace: current.namespace });
    },
    async depth(pool, rankId, names) {
      return (await current.state.snapshot(pool, [rankId], names)).matchBlocks.get(rankId) ?? 0;
    },
    async close() {
      await Promise.all(indexers.map((indexer) => indexer.close().catch(() => undefined)));
      client.disconnect();
      await redis.stop();
    },
  };
}

/**
 * Polls `check` until it holds (every 20 ms, up to `timeoutMs`); throws with `what` otherwise. 20 s is a bound,
 * not a wait: on a loaded 2-core machine a SUB's join, a lease round and a replay took over 4 s
 * (kv-events-takeover's lapsed-lease test failed there). The files using it give their tests 60 s.
 */
export async function eventually(what: string, check: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

export function stream(rankId: string, endpoint: string, replayEndpoint: string | null, pool = 'm'): RankStream {
  return { rankId, backendId: rankId.split('@')[0] as string, rank: 0, endpoint, replayEndpoint, pool };
}
