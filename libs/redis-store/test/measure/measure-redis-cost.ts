/**
 * Measures what the README states about Redis cost: memory per prefix entry and Redis CPU per snapshot
 * and reserve. Runs on a Redis of its own (`startRedis({ fresh: true })`), so nothing else skews INFO.
 *
 *   npm run measure -w @kvroute/redis-store
 */
import { startRedis } from '@kvroute/testing';
import { createRedis, waitUntilReady } from '../../src/connection';
import { RedisRoutingState } from '../../src/redis-routing-state';

const BLOCKS = 100_000;
const CHAIN = 100;

function random53(): number {
  return Math.floor(Math.random() * 2 ** 53);
}

function infoField(info: string, field: string): number {
  const match = new RegExp(`^${field}:(\\d+)`, 'm').exec(info);
  if (!match) throw new Error(`INFO has no ${field}`);
  return Number(match[1]);
}

function evalshaUsecPerCall(info: string): number {
  const match = /cmdstat_evalsha:calls=\d+,usec=\d+,usec_per_call=([\d.]+)/.exec(info);
  if (!match) throw new Error('INFO commandstats has no evalsha');
  return Number(match[1]);
}

function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))] as number;
}

const server = await startRedis({ fresh: true });
const redis = createRedis(server.url, 'request-path', { commandTimeoutMs: 10_000 });
await waitUntilReady(redis);
const state = (overrides: { maxBlocksPerPool?: number } = {}): RedisRoutingState =>
  new RedisRoutingState({
    redis,
    maxBlocksPerPool: overrides.maxBlocksPerPool ?? 10_000_000,
    blockIdleTtlMs: 1_800_000,
    leaseTtlMs: 300_000,
    refreshGranularityMs: 1000,
    nowMs: Date.now,
  });

try {
  // --- Memory per prefix entry -------------------------------------------------------------------
  const store = state();
  await store.reserve('warmup', 'b', 'w', [1], 0);
  await redis.flushall();
  const chains = Array.from({ length: BLOCKS / CHAIN }, () => Array.from({ length: CHAIN }, random53));
  const before = infoField(await redis.info('memory'), 'used_memory');
  let lease = 0;
  for (const chain of chains) await store.reserve('llama-3-8b', '10.0.0.1:8000', `l${lease++}`, chain, 0);
  const oneBackend = infoField(await redis.info('memory'), 'used_memory');
  for (const chain of chains) await store.reserve('llama-3-8b', '10.0.0.2:8000', `l${lease++}`, chain, 0);
  const twoBackends = infoField(await redis.info('memory'), 'used_memory');
  const sampleKey = `kvr:v1:{llama-3-8b}:blk:${chains[0]?.[0]}`;
  const blockKeyUsage = (await redis.memory('USAGE', sampleKey, 'SAMPLES', 0)) ?? 0;
  const lruUsage = (await redis.memory('USAGE', 'kvr:v1:{llama-3-8b}:lru', 'SAMPLES', 0)) ?? 0;
  console.log('memory (INFO used_memory delta, 100k blocks of 100-block chains, 53-bit hashes, idle TTL set):');
  console.log(`  first backend:  ${((oneBackend - before) / BLOCKS).toFixed(1)} bytes per block (block key + TTL + lru member)`);
  console.log(`  second backend: ${((twoBackends - oneBackend) / BLOCKS).toFixed(1)} bytes per extra (block, backend) entry`);
  console.log(`  MEMORY USAGE of one block key with 2 backends: ${blockKeyUsage} bytes; lru ZSET: ${(lruUsage / BLOCKS).toFixed(1)} bytes per member`);
  await redis.flushall();

  // --- CPU per snapshot: 16 backends × 128 blocks --------------------------------------------------
  const backends = Array.from({ length: 16 }, (_, i) => `10.0.${i}.1:8000`);
  const chain = Array.from({ length: 128 }, random53);
  const scenarios: { name: string; depths: readonly number[] }[] = [
    { name: 'no backend holds the prefix', depths: backends.map(() => 0) },
    { name: '4 owners at 2 depths (128, 37)', depths: backends.map((_, i) => (i < 2 ? 128 : i < 4 ? 37 : 0)) },
    { name: '16 owners at 16 distinct depths', depths: backends.map((_, i) => 8 * (i + 1)) },
  ];
  console.log('\nRedis CPU per call (INFO commandstats evalsha usec_per_call; 2 leases per backend) and loopback round trip:');
  for (const scenario of scenarios) {
    const pool = `pool-${scenario.name.length}`;
    for (const [i, backend] of backends.entries()) {
      const depth = scenario.depths[i] as number;
      await store.reserve(pool, backend, `x${i}`, chain.slice(0, depth), 500);
      await store.reserve(pool, backend, `y${i}`, [], 200);
    }
    await store.snapshot(pool, backends, chain);
    await redis.config('RESETSTAT');
    const latencies: number[] = [];
    for (let n = 0; n < 2000; n++) {
      const started = performance.now();
      await store.snapshot(pool, backends, chain);
      latencies.push(performance.now() - started);
    }
    latencies.sort((a, b) => a - b);
    const stats = await redis.info('commandstats');
    const probes = /cmdstat_hgetall:calls=(\d+)/.exec(stats)?.[1] ?? '0';
    console.log(
      `  snapshot 16×128, ${scenario.name}: ${evalshaUsecPerCall(stats)} µs CPU, ${Number(probes) / 2000} HGETALL probes, round trip p50 ${(percentile(latencies, 0.5) * 1000).toFixed(0)} µs / p99 ${(percentile(latencies, 0.99) * 1000).toFixed(0)} µs`,
    );
  }

  // --- CPU per reserve --------------------------------------------------------------------------
  await redis.config('RESETSTAT');
  for (let n = 0; n < 500; n++) await store.reserve('reserve-new', 'b', `n${n}`, Array.from({ length: 128 }, random53), 300);
  console.log(`  reserve, 128 new blocks: ${evalshaUsecPerCall(await redis.info('commandstats'))} µs CPU`);
  const repeated = Array.from({ length: 128 }, random53);
  await store.reserve('reserve-repeat', 'b', 'first', repeated, 300);
  await redis.config('RESETSTAT');
  for (let n = 0; n < 500; n++) await store.reserve('reserve-repeat', 'b', `r${n}`, repeated, 300);
  console.log(`  reserve, 128 blocks recorded < 1 s ago (skipped): ${evalshaUsecPerCall(await redis.info('commandstats'))} µs CPU`);
  const capped = state({ maxBlocksPerPool: 16_384 });
  for (let n = 0; n < 200; n++) await capped.reserve('reserve-cap', 'b', `c${n}`, Array.from({ length: 128 }, random53), 0);
  await redis.config('RESETSTAT');
  for (let n = 0; n < 500; n++) await capped.reserve('reserve-cap', 'b', `d${n}`, Array.from({ length: 128 }, random53), 0);
  console.log(`  reserve, 128 new blocks at the 16 384-block cap (batch trims of 1 024): ${evalshaUsecPerCall(await redis.info('commandstats'))} µs CPU on average`);
} finally {
  await redis.quit();
  await server.stop();
}
