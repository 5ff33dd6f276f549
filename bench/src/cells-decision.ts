/**
 * Benchmark: one hot model on a Redis Cluster, its pool whole or split into cells (`poolCells`,
 * docs/adr/0007) — `npm run bench:cells`. Starts its own 3-master cluster (`startRedisCluster`, no
 * replicas), and for each pool size × cell count routes the next turn of pre-filled conversations
 * (8k-token prompts, the traffic of `bench:redis-decision`'s "conversation" rows) with the default
 * `cacheaware` policy through the router's store on a cluster client, `--concurrency` decisions in
 * flight, each decide + release.
 *
 * What one pool can sustain is bounded by its busiest shard: every master's script time (`INFO
 * commandstats`, FCALL + EVALSHA + EVAL usec) is read after the pass, and the pool's ceiling is
 * decisions × 1e6 / the busiest master's usec. With one cell that is one master's thread; with cells
 * it is shared by the masters that hold them. The wall rate this machine reached is printed too, but
 * on a small machine the cluster's nodes and this client share the cores, so the ceiling, not the wall
 * rate, is what grows with shards. Also printed: which masters the cells landed on, the share of
 * turns routed to the previous turn's backend (the hit rate a split must keep), and spills.
 *
 * Usage: npm run bench:cells -- [--pools 16,64,256] [--cells 1,3,6] [--samples 1500] [--warmup 100]
 *        [--concurrency 16] [--prompt-tokens 8192] [--inflight-per-backend 4] [--turn-gap-ms 30000]
 * Writes bench/results/cells-<time>.json.
 */
import { parseCommandLine } from '@kvroute/platform/command-line';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { RedisClient } from '@kvroute/redis-store';
import type { BackendInfo, RoutingPolicy, RoutingRequest } from '@kvroute/routing';
import type { TestRedisCluster } from '@kvroute/testing';

const args = parseCommandLine({
  usage: 'npm run bench:cells -- [options]',
  summary:
    'Decisions per second over a pool split into cells (poolCells), against a private redis-server.\nWrites bench/results/cells-<time>.json.',
  options: {
    pools: { type: 'string', default: '16,64,256', value: 'numbers', description: 'pool sizes (backends)' },
    cells: { type: 'string', default: '1,3,6', value: 'numbers', description: 'cell counts (poolCells)' },
    samples: { type: 'string', default: '1500', value: 'number', description: 'decisions measured per cell' },
    warmup: { type: 'string', default: '100', value: 'number', description: 'decisions before measuring' },
    concurrency: { type: 'string', default: '16', value: 'number', description: 'decisions in flight' },
    'prompt-tokens': { type: 'string', default: '8192', value: 'number', description: 'prompt size (tokens)' },
    'inflight-per-backend': {
      type: 'string',
      default: '4',
      value: 'number',
      description: 'open leases on every backend',
    },
    'turn-gap-ms': {
      type: 'string',
      default: '30000',
      value: 'number',
      description: "age of the pre-filled conversations' previous turn",
    },
  },
});

// Loaded once the command line is accepted: --help, --version and a mistyped flag answer without them.
const { createRedis, poolKeys, RedisRoutingState, waitUntilReady } = await import('@kvroute/redis-store');
const { createPolicy, decide } = await import('@kvroute/routing');
const { startRedisCluster } = await import('@kvroute/testing');
const { percentile } = await import('@kvroute/workloads');
const { Redis } = await import('ioredis');
const { backendInfos, buildWorkload, inBatches, POOL, scriptStats, serverCpuSeconds, STATE_DEFAULTS } = await import(
  './decision-workload'
);
// Classes also named as types: a type-only import of the name would clash with the const above.
type Redis = InstanceType<typeof Redis>;
type RedisRoutingState = InstanceType<typeof RedisRoutingState>;

const pools = args.pools.split(',').map(Number);
const cellCounts = args.cells.split(',').map(Number);
const samples = Number(args.samples);
const warmup = Number(args.warmup);
const concurrency = Number(args.concurrency);
const promptTokens = Number(args['prompt-tokens']);
const inflightPerBackend = Number(args['inflight-per-backend']);
const turnGapMs = Number(args['turn-gap-ms']);
const MASTERS = 3;
const repoRoot = join(import.meta.dirname, '..', '..');

interface MasterLoad {
  port: number;
  /** Cells of the pool this master serves. */
  cells: number;
  scriptCalls: number;
  scriptUsec: number;
  /** redis-server process CPU (user + sys) during the pass, µs. */
  cpuUsec: number;
}

interface PassResult {
  backends: number;
  cells: number;
  decisions: number;
  /** Distinct masters holding the pool's cells. */
  mastersUsed: number;
  masters: MasterLoad[];
  /** Script usec per decision, over all masters. */
  scriptUsecPerDecision: number;
  /** Script usec per decision on the busiest master. */
  busiestUsecPerDecision: number;
  /** decisions × 1e6 / the busiest master's script usec: the pool's ceiling. */
  ceilingPerSecond: number;
  /** The same from the busiest master's whole process CPU. */
  ceilingByCpuPerSecond: number;
  /** What this machine reached (client and nodes share its cores). */
  wallPerSecond: number;
  decideMs: { p50: number; p99: number };
  /** Share of next turns routed to the backend that served the previous turn. */
  toOwnerFraction: number;
  spills: number;
}

/** One plain connection per master, for INFO, RESETSTAT and FLUSHALL (a cluster client would spread them). */
function masterConnections(cluster: TestRedisCluster): Redis[] {
  return cluster.nodes
    .filter((node) => node.role === 'master' && node.running)
    .map((node) => new Redis({ host: node.host, port: node.port, lazyConnect: false, maxRetriesPerRequest: 1 }));
}

async function routeTurn(
  state: RedisRoutingState,
  policy: RoutingPolicy,
  backends: readonly BackendInfo[],
  request: RoutingRequest,
  leaseId: string,
): Promise<string> {
  const result = await decide(state, {
    pool: POOL,
    request,
    backends,
    policy,
    context: { nowMs: Date.now(), random: Math.random },
    leaseId,
  });
  if (result.decision.kind !== 'routed') throw new Error(`policy rejected the request: ${result.decision.reason}`);
  await state.release(POOL, result.decision.backendId, leaseId, result.blocksAtFirstOutput);
  return result.decision.backendId;
}

async function pass(
  cluster: TestRedisCluster,
  client: RedisClient,
  masters: Redis[],
  backendCount: number,
  cells: number,
  workload: ReturnType<typeof buildWorkload>,
): Promise<PassResult> {
  await Promise.all(masters.map((master) => master.flushall()));
  let spills = 0;
  const options = { redis: client, ...STATE_DEFAULTS, poolCells: cells };
  const state = new RedisRoutingState({ ...options, nowMs: Date.now, onCellSpill: () => spills++ });
  const policy = createPolicy('cacheaware');
  const backends = backendInfos(backendCount);

  // The previous turns, served `turnGapMs` ago, each where the policy sent it; then open leases.
  const past = new RedisRoutingState({ ...options, nowMs: () => Date.now() - turnGapMs });
  const owners: string[] = new Array<string>(workload.previous.length);
  await inBatches(workload.previous, 16, async (request, c) => {
    owners[c] = await routeTurn(past, policy, backends, request, `pre-${c}`);
  });
  const open = new RedisRoutingState({ ...options, leaseTtlMs: 600_000, nowMs: Date.now });
  await inBatches(backends, 16, async (backend) => {
    for (let j = 0; j < inflightPerBackend; j++)
      await open.reserve(POOL, backend.id, `open-${backend.id}-${j}`, [], 500);
  });
  for (let c = 0; c < warmup; c++)
    await routeTurn(state, policy, backends, workload.next[c] as RoutingRequest, `warm-${c}`);

  await Promise.all(masters.map((master) => master.config('RESETSTAT')));
  const cpuBefore = await Promise.all(masters.map(async (master) => serverCpuSeconds(await master.info('cpu'))));
  const decideMs: number[] = [];
  let toOwner = 0;
  let nextIndex = warmup;
  const end = warmup + samples;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let c = nextIndex++; c < end; c = nextIndex++) {
        const at = performance.now();
        const backend = await routeTurn(state, policy, backends, workload.next[c] as RoutingRequest, `turn-${c}`);
        decideMs.push(performance.now() - at);
        if (backend === owners[c]) toOwner++;
      }
    }),
  );
  const wallSeconds = (performance.now() - started) / 1000;
  const cpuAfter = await Promise.all(masters.map(async (master) => serverCpuSeconds(await master.info('cpu'))));
  const stats = await Promise.all(masters.map(async (master) => scriptStats(await master.info('commandstats'))));

  const cellMasters = Array.from(
    { length: cells },
    (_, index) => cluster.masterOf(poolKeys(POOL, undefined, { index, count: cells }).prefix).port,
  );
  const loads: MasterLoad[] = masters.map((master, k) => ({
    port: master.options.port as number,
    cells: cellMasters.filter((port) => port === master.options.port).length,
    scriptCalls: (stats[k] as { calls: number }).calls,
    scriptUsec: (stats[k] as { usec: number }).usec,
    cpuUsec: ((cpuAfter[k] as number) - (cpuBefore[k] as number)) * 1e6,
  }));
  const busiest = Math.max(...loads.map((load) => load.scriptUsec));
  const busiestCpu = Math.max(...loads.map((load) => load.cpuUsec));
  return {
    backends: backendCount,
    cells,
    decisions: samples,
    mastersUsed: new Set(cellMasters).size,
    masters: loads,
    scriptUsecPerDecision: loads.reduce((sum, load) => sum + load.scriptUsec, 0) / samples,
    busiestUsecPerDecision: busiest / samples,
    ceilingPerSecond: (samples * 1e6) / busiest,
    ceilingByCpuPerSecond: (samples * 1e6) / busiestCpu,
    wallPerSecond: samples / wallSeconds,
    decideMs: { p50: percentile(decideMs, 50), p99: percentile(decideMs, 99) },
    toOwnerFraction: toOwner / samples,
    spills,
  };
}

const whole = (value: number): string => Math.round(value).toLocaleString('en-US');

async function main(): Promise<void> {
  const startedAt = new Date();
  let source = '';
  const cluster = await startRedisCluster({
    masters: MASTERS,
    replicasPerMaster: 0,
    logger: (line) => (source = line),
  });
  const masters = masterConnections(cluster);
  const client = createRedis(cluster.url, 'request-path', { commandTimeoutMs: 5_000 });
  const results: PassResult[] = [];
  try {
    await waitUntilReady(client);
    console.log(
      `Cells: ${source.replace(/^\[testing\] /, '')}; cacheaware, ${promptTokens}-token conversations, ` +
        `${samples} decisions per pass after ${warmup} warm-up, ` +
        `${concurrency} in flight, ${inflightPerBackend} open leases per backend`,
    );
    const workload = buildWorkload(promptTokens, warmup + samples);
    const total = pools.length * cellCounts.length;
    for (const backendCount of pools) {
      for (const cells of cellCounts) {
        const result = await pass(cluster, client, masters, backendCount, cells, workload);
        results.push(result);
        console.log(
          `[${results.length}/${total}] ${backendCount} backends, ${cells} cell(s) on ${result.mastersUsed} ` +
            `master(s): busiest master ${result.busiestUsecPerDecision.toFixed(0)} µs/decision → ` +
            `ceiling ${whole(result.ceilingPerSecond)}/s; wall ${whole(result.wallPerSecond)}/s; to owner ${(100 * result.toOwnerFraction).toFixed(1)} %`,
        );
      }
    }
  } finally {
    await client.quit().catch(() => undefined);
    await Promise.all(masters.map((master) => master.quit().catch(() => undefined)));
    await cluster.stop();
  }

  console.log(`\n### One pool on ${MASTERS} shards: whole (1 cell) vs split into cells\n`);
  console.log(
    '| backends | cells | masters used | script µs / decision (all) | busiest master µs / decision ' +
      '| ceiling decisions/s | × 1 cell | ceiling by process CPU | wall decisions/s here | decide ' +
      '+ release p50 / p99 ms | to owner | spills |',
  );
  console.log('|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of results) {
    const single = results.find((other) => other.backends === r.backends && other.cells === 1);
    console.log(
      `| ${r.backends} | ${r.cells} | ${r.mastersUsed} | ${r.scriptUsecPerDecision.toFixed(0)} | ` +
        `${r.busiestUsecPerDecision.toFixed(0)} | ${whole(r.ceilingPerSecond)} | ` +
        `${single ? `${(r.ceilingPerSecond / single.ceilingPerSecond).toFixed(2)}×` : '–'} | ${whole(r.ceilingByCpuPerSecond)} | ${whole(r.wallPerSecond)} | ` +
        `${r.decideMs.p50.toFixed(2)} / ${r.decideMs.p99.toFixed(2)} | ${(100 * r.toOwnerFraction).toFixed(1)} % | ${r.spills} |`,
    );
  }

  const outDir = join(repoRoot, 'bench', 'results');
  mkdirSync(outDir, { recursive: true });
  const file = `cells-${startedAt.toISOString().replaceAll(':', '-').slice(0, 19)}.json`;
  writeFileSync(
    join(outDir, file),
    JSON.stringify(
      {
        startedAt: startedAt.toISOString(),
        cluster: source,
        node: process.version,
        settings: {
          pools,
          cellCounts,
          samples,
          warmup,
          concurrency,
          promptTokens,
          inflightPerBackend,
          turnGapMs,
          masters: MASTERS,
        },
        results,
      },
      null,
      2,
    ),
  );
  console.log(`\nresults written to bench/results/${file}`);
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
