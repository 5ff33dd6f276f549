/**
 * Benchmark (issue 29, acceptance 5): does one KV-event indexer core keep up with 1,000 backends
 * storing 50 blocks/s each? Real sockets on loopback: a child process binds `--backends` ZMQ PUB
 * sockets and publishes vLLM-format batches (`[topic, seq, msgpack [ts, events, rank]]`), each backend
 * every 100 ms one BlockStored of `--blocks-per-s / 10` blocks (token ids, chained on its previous
 * block) and, once it holds 400 blocks, one BlockRemoved of as many old ones (an LRU cache at steady
 * state). This process runs one indexer replica (KvEventsIndexer: one SUB per backend, naming,
 * apply-kv-events.lua per batch) against a private redis-server. No replay sockets: 2,000 bound
 * sockets would only idle (replay is exercised by the tests).
 *
 * Reports, over `--seconds` after a 3 s warm-up: batches and blocks applied per second against the
 * offered rate, the indexer's CPU (this process: its event loop, ZMQ's I/O thread and ioredis), and
 * Redis's CPU (INFO cpu), with the drop and gap counters.
 *
 * Usage: npm run bench:indexer -- [--backends 1000] [--blocks-per-s 50] [--seconds 20]
 */
import { parseCommandLine } from '@kvroute/platform/command-line';
import { spawn } from 'node:child_process';
import { createInterface } from 'node:readline';

const args = parseCommandLine({
  usage: 'npm run bench:indexer -- [options]',
  summary: "The KV-event indexer's CPU over many backends publishing blocks.",
  options: {
    backends: { type: 'string', default: '1000', value: 'number', description: 'backends publishing KV events' },
    'blocks-per-s': {
      type: 'string',
      default: '50',
      value: 'number',
      description: 'blocks stored per second per backend',
    },
    seconds: { type: 'string', default: '20', value: 'number', description: 'measured window, after a 3 s warm-up' },
    publishers: { type: 'boolean', default: false, description: 'internal: run as the publishing child process' },
  },
});

// Loaded once the command line is accepted: --help, --version and a mistyped flag answer without them.
// The bench drives the poller's indexer in process (its CPU is this process's: eslint.config allows it).
const { KvEventsIndexer } = await import('@kvroute/health-poller/kv-events/indexer');
const { PollerMetrics } = await import('@kvroute/health-poller/metrics');
const { createRedis, KvEventsIndex, KvEventsLeases, waitUntilReady } = await import('@kvroute/redis-store');
// A private Redis as the tests start one (as poller-load.ts; eslint.config lists those files).
const { startRedis } = await import('@kvroute/testing');
const { Packr } = await import('msgpackr');
const { Publisher } = await import('zeromq');
// Classes also named as types: a type-only import of the name would clash with the const above.
type Publisher = InstanceType<typeof Publisher>;

const backends = Number(args.backends);
const blocksPerSecond = Number(args['blocks-per-s']);
const seconds = Number(args.seconds);
const TICK_MS = 100;
const BLOCK = 16;
const HELD = 400;
const WARMUP_MS = 3_000;

/** The child: binds the PUB sockets, prints their endpoints, publishes from "go" until killed. */
async function publishers(): Promise<void> {
  const perTick = Math.max(1, Math.round((blocksPerSecond * TICK_MS) / 1000));
  const packr = new Packr({ useRecords: false });
  const sockets: Publisher[] = [];
  for (let i = 0; i < backends; i++) {
    const pub = new Publisher({ linger: 0, sendHighWaterMark: 10_000 });
    await pub.bind('tcp://127.0.0.1:*');
    sockets.push(pub);
  }
  process.stdout.write(`${JSON.stringify(sockets.map((pub) => pub.lastEndpoint))}\n`);
  await new Promise((resolve) => createInterface({ input: process.stdin }).once('line', resolve));
  const state = sockets.map(() => ({ seq: 0n, next: 0, parent: null as bigint | null, held: [] as bigint[] }));
  const seqFrame = Buffer.alloc(8);
  // Each tick of 10 ms serves a tenth of the backends, so each sends one batch per 100 ms.
  let slice = 0;
  setInterval(() => {
    const from = Math.floor((slice * backends) / 10);
    const to = Math.floor(((slice + 1) * backends) / 10);
    slice = (slice + 1) % 10;
    for (let b = from; b < to; b++) {
      const s = state[b] as (typeof state)[number];
      const hashes: bigint[] = [];
      const tokens: number[] = [];
      for (let k = 0; k < perTick; k++) {
        hashes.push(0x8000_0000_0000_0000n + BigInt(b) * 1_000_000_000n + BigInt(s.next));
        for (let t = 0; t < BLOCK; t++) tokens.push((s.next * 131 + t * 7 + b) % 150_000);
        s.next += 1;
      }
      const events: unknown[] = [['BlockStored', hashes, s.parent, tokens, BLOCK, null, 'GPU']];
      s.parent = hashes[hashes.length - 1] as bigint;
      s.held.push(...hashes);
      if (s.held.length > HELD) events.push(['BlockRemoved', s.held.splice(0, s.held.length - HELD), 'GPU']);
      seqFrame.writeBigUInt64BE(s.seq);
      s.seq += 1n;
      void (sockets[b] as Publisher)
        .send([Buffer.alloc(0), Buffer.from(seqFrame), packr.pack([Date.now() / 1000, events, null])])
        .catch(() => undefined);
    }
  }, TICK_MS / 10);
}

async function redisCpuSeconds(redis: ReturnType<typeof createRedis>): Promise<number> {
  const info = await redis.info('cpu');
  const figure = (name: string) => Number(new RegExp(`^${name}:([\\d.]+)`, 'm').exec(info)?.[1] ?? 0);
  return figure('used_cpu_user') + figure('used_cpu_sys');
}

async function main(): Promise<void> {
  if (args.publishers) return publishers();
  const server = await startRedis({ fresh: true, logger: () => undefined });
  const redis = createRedis(server.url, 'worker');
  await waitUntilReady(redis);
  const child = spawn(
    process.execPath,
    [
      ...process.execArgv,
      process.argv[1] as string,
      '--publishers',
      `--backends=${backends}`,
      `--blocks-per-s=${blocksPerSecond}`,
    ],
    { stdio: ['pipe', 'pipe', 'inherit'] },
  );
  const endpoints = await new Promise<string[]>((resolve) =>
    createInterface({ input: child.stdout as NodeJS.ReadableStream }).once('line', (line) => resolve(JSON.parse(line))),
  );
  const metrics = new PollerMetrics({ backends: () => backends });
  const index = new KvEventsIndex({ redis, nowMs: Date.now, blockIdleTtlMs: 1_800_000, maxBlocksPerPool: 10_000_000 });
  const indexer = new KvEventsIndexer({
    replicaId: 'bench',
    leases: new KvEventsLeases({ redis, replicaId: 'bench', leaseTtlMs: 5000 }),
    apply: (pool, rankId, batch) => index.apply(pool, rankId, batch),
    nowMs: Date.now,
    leaseTtlMs: 5000,
    topic: '',
    limits: { maxBatchEvents: 4096, maxBatchBlocks: 65_536 },
    maxQueuedBatches: 1000,
    replayTimeoutMs: 2000,
    namesPerRank: 1024,
    metrics,
  });
  indexer.setStreams(
    endpoints.map((endpoint, i) => ({
      rankId: `b${i}`,
      backendId: `b${i}`,
      rank: 0,
      endpoint,
      replayEndpoint: null,
      pool: 'm',
    })),
  );
  indexer.start();
  await indexer.tick();
  child.stdin?.write('go\n');
  await new Promise((resolve) => setTimeout(resolve, WARMUP_MS));
  const read = async () => ({
    atMs: performance.now(),
    cpu: process.cpuUsage(),
    redisCpu: await redisCpuSeconds(redis),
    batches: await metrics.kvCount('batches', 'applied'),
    stored: await metrics.kvCount('blocks', 'stored'),
    removed: await metrics.kvCount('blocks', 'removed'),
  });
  const start = await read();
  await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
  const end = await read();
  const wall = (end.atMs - start.atMs) / 1000;
  const cpu = process.cpuUsage(start.cpu);
  const problems: Record<string, number> = {};
  for (const problem of ['queue_overflow', 'sequence_gap', 'orphan_block', 'unknown_hash', 'apply_failed'])
    problems[problem] = await metrics.kvCount('problems', problem);
  const report = {
    backends,
    offeredBlocksPerSecond: backends * Math.max(1, Math.round((blocksPerSecond * TICK_MS) / 1000)) * (1000 / TICK_MS),
    offeredBatchesPerSecond: backends * (1000 / TICK_MS),
    appliedBatchesPerSecond: Math.round((end.batches - start.batches) / wall),
    storedBlocksPerSecond: Math.round((end.stored - start.stored) / wall),
    removedEntriesPerSecond: Math.round((end.removed - start.removed) / wall),
    indexerCpuCores: Number(((cpu.user + cpu.system) / 1e6 / wall).toFixed(3)),
    redisCpuCores: Number(((end.redisCpu - start.redisCpu) / wall).toFixed(3)),
    problems,
    seconds: Number(wall.toFixed(1)),
  };
  process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  child.kill();
  await indexer.abandon();
  redis.disconnect();
  await server.stop();
  process.exit(0);
}

main().catch((error: unknown) => {
  process.stderr.write(`indexer-load: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
