/**
 * Benchmark: what one routing decision costs when the routing state lives in Redis
 * (`npm run bench:redis-decision`), against a private `redis-server` on loopback (`startRedis({ fresh: true })`).
 *
 * A decision is what the router does per request: `decide(state, input)` (@kvroute/routing) on the Redis
 * store with the default `cacheaware` policy, i.e. one Lua script (route.lua: figures of every candidate,
 * the policy's rule with its explanation, the lease, the ownership record) and the decision built from
 * the script's outcome (the policy's `choose` does not run), and, once the
 * response is done, `release` (a second script, after the response, off the request's critical path).
 * Measured per cell (pool size × prompt size × traffic), one decision at a time over one `request-path`
 * connection (`createRedis(url, 'request-path')`, the router's):
 *
 * - decision time: client wall time of decide + release (and, separately, of what a client waits on before
 *   its request can be forwarded: decide). Hashing the body (`buildRoutingRequest`) is done beforehand and
 *   not included (its mean is printed as a note).
 * - Redis CPU per decision: `INFO commandstats` usec of FCALL + EVALSHA + EVAL over the cell's decisions (the scripts'
 *   execution time), and the whole redis-server process CPU (`INFO cpu`, getrusage: also network I/O and
 *   the event loop). Decisions/s one Redis can serve = 1e6 / µs per decision. Redis 7.0 keeps no per-script
 *   statistics (and SLOWLOG would log every command inside the scripts, slowing them), so the split is:
 *   release from a pass of releases alone just after, route = the rest.
 * - script calls (round trips) per decision, from the commandstats call counts; a MONITOR pass at the end
 *   checks that the request-path connection sends nothing else.
 * - memory: `INFO memory` on a second fresh Redis before and after recording `--memory-blocks` (1M) prefix
 *   blocks across 16 backends through decide/release, as chains of 128 blocks (8k-token prompts), with the
 *   cap set above them (`maxBlocksPerPool` 2.5M) so no generation turns.
 *
 * Traffic: every prompt starts with the same 256-token system prompt (so most backends hold its first
 * blocks, as in a real fleet). The index is pre-filled with one conversation per measured decision,
 * spread round-robin over the backends, each recorded `--turn-gap-ms` ago (a previous turn); every backend
 * also holds `--inflight-per-backend` open leases.
 * - conversation: each request is the next turn of one pre-filled conversation (+ ~200 tokens: an
 *   assistant reply and a user message), so all but the last few blocks are already recorded.
 * - unique: each request is a new conversation (shares only the system prompt): all blocks are new.
 *
 * Engines: every backend has engine figures (the health poller's, as the router passes them), and before each
 * decision `--engine-updates` (1) backends get a new one, round-robin: a poller's updates arriving between decisions.
 *
 * Arguments: the bytes a decision's script calls carry (keys and arguments, as the client writes them), counted on
 * the request-path connection around `decide` (the release is not counted).
 *
 * Usage: npm run bench:redis-decision -- [--pools 4,16,64] [--prompts 1024,8192,32768] [--samples 400]
 *        [--warmup 25] [--inflight-per-backend 4] [--turn-gap-ms 30000] [--memory-blocks 1000000]
 *        [--engine-updates 1]
 * Writes bench/results/redis-decision-<time>.json.
 */
import { parseCommandLine } from '@kvroute/platform/command-line';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { LuaScript, RedisClient } from '@kvroute/redis-store';
import type { BackendInfo, EngineLoad, RoutingPolicy, RoutingRequest } from '@kvroute/routing';
import type { TestRedis } from '@kvroute/testing';
import type { Workload } from './decision-workload';

const args = parseCommandLine({
  usage: 'npm run bench:redis-decision -- [options]',
  summary:
    'What one routing decision costs in Redis (one Lua script), by pool size and prompt length.\nWrites bench/results/redis-decision-<time>.json.',
  options: {
    pools: { type: 'string', default: '4,16,64', value: 'numbers', description: 'pool sizes (backends)' },
    prompts: { type: 'string', default: '1024,8192,32768', value: 'numbers', description: 'prompt sizes (tokens)' },
    samples: { type: 'string', default: '400', value: 'number', description: 'decisions measured per cell' },
    warmup: { type: 'string', default: '25', value: 'number', description: 'decisions before measuring, per cell' },
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
    'memory-blocks': {
      type: 'string',
      default: '1000000',
      value: 'number',
      description: 'prefix blocks recorded for the memory figure',
    },
    'engine-updates': {
      type: 'string',
      default: '1',
      value: 'number',
      description: 'backends given new engine figures before each decision',
    },
  },
});

// Loaded once the command line is accepted: --help, --version and a mistyped flag answer without them.
const redisStore = await import('@kvroute/redis-store');
const { createRedis, poolKeys, RedisRoutingState, SCRIPTS, waitUntilReady } = redisStore;
const { createPolicy, decide: decideRoute } = await import('@kvroute/routing');
const { startRedis } = await import('@kvroute/testing');
const { mean, percentile } = await import('@kvroute/workloads');
const { Redis: SingleServerRedis } = await import('ioredis');
const {
  BLOCK_SIZE_BYTES,
  backendInfos,
  buildWorkload,
  inBatches,
  infoNumber,
  raiseRedisPriority,
  POOL,
  routingRequest,
  scriptStats,
  serverCpuSeconds,
  STATE_DEFAULTS,
  SYSTEM_PROMPT,
  SYSTEM_TOKENS,
  TURN_TOKENS,
  words,
} = await import('./decision-workload');
// Classes also named as types: a type-only import of the name would clash with the const above.
type SingleServerRedis = InstanceType<typeof SingleServerRedis>;
type RedisRoutingState = InstanceType<typeof RedisRoutingState>;

const pools = args.pools.split(',').map(Number);
const prompts = args.prompts.split(',').map(Number);
const samples = Number(args.samples);
const warmup = Number(args.warmup);
const inflightPerBackend = Number(args['inflight-per-backend']);
const turnGapMs = Number(args['turn-gap-ms']);
const memoryBlocks = Number(args['memory-blocks']);
const engineUpdates = Number(args['engine-updates']);

/** Memory pass: backends and chain length (128 blocks = an 8k-token prompt). */
const MEMORY_BACKENDS = 16;
const MEMORY_CHAIN = 128;
/** The issue's targets, at 16 backends and 8k-token prompts. */
const TARGET = {
  backends: 16,
  promptTokens: 8192,
  roundTrips: 1,
  p50Ms: 0.3,
  p99Ms: 1,
  decisionsPerSecond: 10_000,
} as const;
const repoRoot = join(import.meta.dirname, '..', '..');

type Redis = ReturnType<typeof createRedis>;

/** The benchmark's own redis-server (startRedis) is one server, so its connections are single-server clients; MONITOR needs one. */
function singleServer(client: RedisClient): SingleServerRedis {
  if (!(client instanceof SingleServerRedis))
    throw new Error('bench:redis-decision runs on one redis-server, not a cluster');
  return client;
}
type Traffic = 'conversation' | 'unique';

interface ScriptCost {
  callsPerDecision: number;
  usecPerCall: number;
}

interface CellResult {
  backends: number;
  promptTokens: number;
  blocksPerRequest: number;
  traffic: Traffic;
  decisions: number;
  /** decide + release, client wall ms. */
  decisionMs: { p50: number; p99: number; mean: number };
  /** decide: what a request waits before it can be forwarded. */
  forwardMs: { p50: number; p99: number };
  releaseMs: { p50: number; p99: number };
  /** FCALL + EVALSHA + EVAL calls per decision (commandstats). */
  scriptCallsPerDecision: number;
  /** FCALL + EVALSHA + EVAL usec per decision (commandstats): the scripts' execution time. */
  redisUsecPerDecision: number;
  /**
   * Per script: calls per decision as the client made them; usec per call of release from a pass of releases alone
   * (commandstats), route = the decisions' total minus that.
   */
  perScript: Record<string, ScriptCost>;
  /** 1e6 / redisUsecPerDecision. */
  decisionsPerSecondPerRedis: number;
  /** Whole redis-server process CPU (user + sys) per decision, incl. network I/O. */
  serverCpuUsecPerDecision: number;
  /** conversation traffic: share of decisions routed to the backend that holds the conversation. */
  toOwnerFraction: number | null;
  conflicts: number;
  /** Bytes of keys and arguments the decision's script calls carried (release not counted): per decision, per call. */
  decideArgumentBytes: { perDecision: number; perCall: number };
}

// --- Decisions -------------------------------------------------------------------------------------------

interface Timing {
  forwardMs: number;
  releaseMs: number;
  decisionMs: number;
  backendId: string;
  taken: boolean;
}

/** Engine figures per backend, as the router would pass them: replaced for `engineUpdates` backends per decision. */
const engineLoads = new Map<string, EngineLoad>();
let nextEngineUpdate = 0;

function engineFor(backends: readonly BackendInfo[]): ReadonlyMap<string, EngineLoad> {
  for (const backend of backends) {
    if (!engineLoads.has(backend.id)) engineLoads.set(backend.id, engineLoad(backend.id, 0));
  }
  for (let k = 0; k < engineUpdates; k++) {
    const backend = backends[nextEngineUpdate++ % backends.length] as BackendInfo;
    engineLoads.set(backend.id, engineLoad(backend.id, nextEngineUpdate));
  }
  return engineLoads;
}

function engineLoad(id: string, update: number): EngineLoad {
  return { kvUsage: ((update * 7 + id.length) % 90) / 100, kvCapacityTokens: 100_000, running: 4, waiting: update % 3 };
}

/** Bytes the request-path connection's script calls carried while counting (countArgumentBytes). */
const argumentBytes = { counting: false, bytes: 0, calls: 0 };

/** `client` with the bytes of its `call`/`callBuffer` arguments counted while argumentBytes.counting. */
function countArgumentBytes(client: Redis): Redis {
  return new Proxy(client, {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver) as unknown;
      if ((name !== 'call' && name !== 'callBuffer') || typeof value !== 'function') return value;
      return (command: string, argv: readonly (string | number)[]) => {
        if (argumentBytes.counting) {
          argumentBytes.calls++;
          for (const arg of argv) argumentBytes.bytes += Buffer.byteLength(String(arg));
        }
        return (value as (...a: unknown[]) => unknown).call(target, command, argv);
      };
    },
  });
}

async function decide(
  state: RedisRoutingState,
  policy: RoutingPolicy,
  backends: readonly BackendInfo[],
  request: RoutingRequest,
  leaseId: string,
): Promise<Timing> {
  const engine = engineFor(backends);
  const started = performance.now();
  argumentBytes.counting = true;
  const { decision } = await decideRoute(state, {
    pool: POOL,
    request,
    backends,
    policy,
    context: { nowMs: Date.now(), random: Math.random },
    leaseId,
    engine,
  }).finally(() => (argumentBytes.counting = false));
  const decided = performance.now();
  if (decision.kind !== 'routed') throw new Error(`policy rejected the request: ${decision.reason}`);
  await state.release(POOL, decision.backendId, leaseId);
  const released = performance.now();
  return {
    forwardMs: decided - started,
    releaseMs: released - decided,
    decisionMs: released - started,
    backendId: decision.backendId,
    taken: true,
  };
}

interface Cell {
  readonly control: Redis;
  readonly state: RedisRoutingState;
  readonly policy: RoutingPolicy;
  readonly backends: readonly BackendInfo[];
  readonly promptTokens: number;
}

async function measure(
  cell: Cell,
  traffic: Traffic,
  requests: readonly RoutingRequest[],
  owners: readonly string[] | null,
): Promise<CellResult> {
  const { control, state, policy, backends } = cell;
  for (let i = 0; i < warmup; i++)
    await decide(state, policy, backends, requests[i] as RoutingRequest, `${traffic}-warm-${i}`);
  const measured = requests.slice(warmup, warmup + samples);

  // The decisions.
  argumentBytes.bytes = 0;
  argumentBytes.calls = 0;
  await control.config('RESETSTAT');
  const cpuBefore = serverCpuSeconds(await control.info('cpu'));
  const timings: Timing[] = [];
  let toOwner = 0;
  for (const [k, request] of measured.entries()) {
    const timing = await decide(state, policy, backends, request, `${traffic}-${k}`);
    timings.push(timing);
    if (owners && timing.backendId === owners[warmup + k]) toOwner++;
  }
  const cpuAfter = serverCpuSeconds(await control.info('cpu'));
  const stats = scriptStats(await control.info('commandstats'));
  const decideArgumentBytes = {
    perDecision: argumentBytes.bytes / samples,
    perCall: argumentBytes.bytes / argumentBytes.calls,
  };

  // The releases alone: as many leases (no blocks) taken, then released.
  const owner = (k: number): string => (backends[k % backends.length] as BackendInfo).id;
  for (let k = 0; k < samples; k++) await state.reserve(POOL, owner(k), `release-${k}`, [], 0);
  await control.config('RESETSTAT');
  for (let k = 0; k < samples; k++) await state.release(POOL, owner(k), `release-${k}`);
  const releaseStats = scriptStats(await control.info('commandstats'));

  const pick = (key: keyof Omit<Timing, 'backendId' | 'taken'>): number[] => timings.map((timing) => timing[key]);
  const p = (values: number[]): { p50: number; p99: number } => ({
    p50: percentile(values, 50),
    p99: percentile(values, 99),
  });
  const released = timings.filter((timing) => timing.taken).length;
  const releaseUsec = releaseStats.usec / releaseStats.calls;
  const redisUsecPerDecision = stats.usec / samples;
  return {
    backends: backends.length,
    promptTokens: cell.promptTokens,
    blocksPerRequest: mean(measured.map((request) => request.blockHashes.length)),
    traffic,
    decisions: samples,
    decisionMs: { ...p(pick('decisionMs')), mean: mean(pick('decisionMs')) },
    forwardMs: p(pick('forwardMs')),
    releaseMs: p(pick('releaseMs')),
    scriptCallsPerDecision: stats.calls / samples,
    redisUsecPerDecision,
    perScript: {
      route: { callsPerDecision: 1, usecPerCall: (stats.usec - released * releaseUsec) / samples },
      release: { callsPerDecision: released / samples, usecPerCall: releaseUsec },
    },
    decisionsPerSecondPerRedis: 1e6 / redisUsecPerDecision,
    serverCpuUsecPerDecision: ((cpuAfter - cpuBefore) * 1e6) / samples,
    toOwnerFraction: owners ? toOwner / samples : null,
    conflicts: samples - released,
    decideArgumentBytes,
  };
}

/** Fresh index for one pool size: conversations recorded `turnGapMs` ago, round-robin, plus open leases. */
async function prefill(control: Redis, backends: readonly BackendInfo[], workload: Workload): Promise<string[]> {
  await control.flushall();
  const past = new RedisRoutingState({ redis: control, ...STATE_DEFAULTS, nowMs: () => Date.now() - turnGapMs });
  const owners = workload.previous.map((_, c) => (backends[c % backends.length] as BackendInfo).id);
  await inBatches(workload.previous, 16, async (request, c) => {
    await past.reserve(POOL, owners[c] as string, `pre-${c}`, request.blockHashes, 0);
    await past.release(POOL, owners[c] as string, `pre-${c}`);
  });
  // Open leases outlive the cell (a long TTL): every snapshot purges, counts and sums them.
  const open = new RedisRoutingState({ redis: control, ...STATE_DEFAULTS, leaseTtlMs: 600_000, nowMs: Date.now });
  await inBatches(backends, 16, async (backend) => {
    for (let j = 0; j < inflightPerBackend; j++)
      await open.reserve(POOL, backend.id, `open-${backend.id}-${j}`, [], 500);
  });
  return owners;
}

/** The route scripts of `policy`'s rule (none before the store composed route.lua per rule). */
function routeScripts(policy: RoutingPolicy): LuaScript[] {
  const compose = (redisStore as Record<string, unknown>)['routeScriptOf'];
  return typeof compose === 'function' && policy.atomicRule !== undefined
    ? [compose(policy.atomicRule) as LuaScript]
    : [];
}

// --- Round trips (MONITOR) and memory --------------------------------------------------------------------

/** Commands the request-path connection sends per decision, as MONITOR sees them (script-internal calls excluded). */
async function monitorCommandsPerDecision(
  control: Redis,
  requestPath: Redis,
  state: RedisRoutingState,
  policy: RoutingPolicy,
): Promise<{ decisions: number; commandsPerDecision: number; commands: Record<string, number> }> {
  await control.flushall();
  const backends = backendInfos(TARGET.backends);
  const requests = Array.from({ length: 20 }, (_, i) =>
    routingRequest([SYSTEM_PROMPT, { role: 'user', content: `monitor check ${i}: ${words(2000, 3_000_000 + i)}` }]),
  );
  const clientInfo = String(await requestPath.call('CLIENT', 'INFO'));
  const address = /addr=(\S+)/.exec(clientInfo)?.[1];
  const monitor = await singleServer(control).monitor();
  const commands: Record<string, number> = {};
  const scripts = [...Object.values(SCRIPTS), ...routeScripts(policy)];
  const scriptByHead = new Map(
    scripts.flatMap((script) => [
      [script.sha1, script.name],
      [script.asFunction?.name ?? script.sha1, script.name],
    ]),
  );
  monitor.on('monitor', (_time: string, commandArgs: string[], source: string) => {
    if (source !== address) return;
    const command = String(commandArgs[0]).toLowerCase();
    // EVALSHA <sha> and FCALL <function>: named by the script table.
    const key =
      command === 'evalsha' || command === 'fcall'
        ? `${command} ${scriptByHead.get(String(commandArgs[1])) ?? 'unknown'}`
        : command;
    commands[key] = (commands[key] ?? 0) + 1;
  });
  for (const [i, request] of requests.entries()) await decide(state, policy, backends, request, `monitor-${i}`);
  await new Promise((resolve) => setTimeout(resolve, 100));
  monitor.disconnect();
  const total = Object.values(commands).reduce((sum, count) => sum + count, 0);
  return { decisions: requests.length, commandsPerDecision: total / requests.length, commands };
}

interface MemoryResult {
  blocks: number;
  backends: number;
  chainBlocks: number;
  usedMemoryBefore: number;
  usedMemoryAfter: number;
  bytesPerBlock: number;
  usedMemoryPeak: number;
  usedMemoryRss: number;
  ownerFields: number;
  keys: number;
  seconds: number;
  redisUsecPerBlock: number;
}

async function measureMemory(): Promise<MemoryResult> {
  const server = await startRedis({ fresh: true, logger: () => undefined });
  const redis = createRedis(server.url, 'worker');
  try {
    await waitUntilReady(redis);
    const state = new RedisRoutingState({ redis, ...STATE_DEFAULTS, maxBlocksPerPool: 2_500_000, nowMs: Date.now });
    // Load the scripts (their cache counts in used_memory), then start from an empty dataset.
    await state.reserve('warmup', 'b', 'w', [1], 0);
    await state.release('warmup', 'b', 'w');
    await redis.flushall();
    await redis.config('RESETSTAT');
    const before = infoNumber(await redis.info('memory'), 'used_memory');
    const backends = backendInfos(MEMORY_BACKENDS);
    const chains = Array.from({ length: Math.ceil(memoryBlocks / MEMORY_CHAIN) }, (_, c) =>
      Math.min(MEMORY_CHAIN, memoryBlocks - c * MEMORY_CHAIN),
    );
    const started = performance.now();
    let lastReport = started;
    await inBatches(chains, 16, async (length, c) => {
      const backend = (backends[c % backends.length] as BackendInfo).id;
      const chain = Array.from({ length }, () => Math.floor(Math.random() * 2 ** 53));
      await state.reserve(POOL, backend, `mem-${c}`, chain, 0);
      await state.release(POOL, backend, `mem-${c}`);
      if (performance.now() - lastReport > 5000) {
        lastReport = performance.now();
        console.log(
          `  memory: ${Math.min(memoryBlocks, (c + 1) * MEMORY_CHAIN).toLocaleString('en-US')} blocks recorded…`,
        );
      }
    });
    const seconds = (performance.now() - started) / 1000;
    const memory = await redis.info('memory');
    const after = infoNumber(memory, 'used_memory');
    const stats = scriptStats(await redis.info('commandstats'));
    return {
      blocks: memoryBlocks,
      backends: MEMORY_BACKENDS,
      chainBlocks: MEMORY_CHAIN,
      usedMemoryBefore: before,
      usedMemoryAfter: after,
      bytesPerBlock: (after - before) / memoryBlocks,
      usedMemoryPeak: infoNumber(memory, 'used_memory_peak'),
      usedMemoryRss: infoNumber(memory, 'used_memory_rss'),
      ownerFields: (await redis.hlen(poolKeys(POOL).ownersNew)) + (await redis.hlen(poolKeys(POOL).ownersOld)),
      keys: await redis.dbsize(),
      seconds,
      redisUsecPerBlock: stats.usec / memoryBlocks,
    };
  } finally {
    await redis.quit();
    await server.stop();
  }
}

// --- Output ----------------------------------------------------------------------------------------------

const ms = (value: number): string => value.toFixed(value < 10 ? 3 : 1);
const kilo = (tokens: number): string => (tokens % 1024 === 0 ? `${tokens / 1024}k` : String(tokens));
const whole = (value: number): string => Math.round(value).toLocaleString('en-US');
const mb = (bytes: number): string => `${(bytes / 1024 / 1024).toFixed(1)} MB`;

function scriptUsec(result: CellResult, name: string): string {
  const cost = result.perScript[name];
  return cost ? cost.usecPerCall.toFixed(0) : '–';
}

function progressLine(index: number, total: number, result: CellResult): string {
  return (
    `[${index}/${total}] ${result.backends} backends, ${kilo(result.promptTokens)} tokens, ${result.traffic}: ` +
    `decision p50 ${ms(result.decisionMs.p50)} ms, p99 ${ms(result.decisionMs.p99)} ms; ` +
    `Redis ${result.redisUsecPerDecision.toFixed(0)} µs/decision (${whole(result.decisionsPerSecondPerRedis)}/s), ` +
    `${result.scriptCallsPerDecision.toFixed(2)} script calls, ` +
    `${(result.decideArgumentBytes.perCall / 1024).toFixed(2)} KB arguments per decision call`
  );
}

function cellTable(results: readonly CellResult[]): string[] {
  const lines = [
    '| backends | prompt | blocks | traffic | decision p50 / p99 ms | to forward p50 / p99 ms | ' +
      'script calls | Redis µs / decision | route / release µs | decisions/s per Redis | redis-server ' +
      'CPU µs / decision | to owner | decision call arguments |',
    '|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const r of results) {
    lines.push(
      `| ${r.backends} | ${kilo(r.promptTokens)} | ${r.blocksPerRequest.toFixed(0)} | ${r.traffic} ` +
        `| ${ms(r.decisionMs.p50)} / ${ms(r.decisionMs.p99)} | ${ms(r.forwardMs.p50)} / ${ms(r.forwardMs.p99)} ` +
        `| ${r.scriptCallsPerDecision.toFixed(2)} | ` +
        `${r.redisUsecPerDecision.toFixed(0)} | ${scriptUsec(r, 'route')} / ${scriptUsec(r, 'release')} ` +
        `| ${whole(r.decisionsPerSecondPerRedis)} | ${r.serverCpuUsecPerDecision.toFixed(0)} | ` +
        `${r.toOwnerFraction === null ? '–' : `${(100 * r.toOwnerFraction).toFixed(0)} %`} | ` +
        `${(r.decideArgumentBytes.perCall / 1024).toFixed(2)} KB |`,
    );
  }
  return lines;
}

interface TargetRow {
  metric: string;
  target: string;
  conversation: string;
  unique: string;
  met: string;
}

/** Script calls Redis counted per decision, minus the release (sent after the response). */
function roundTripsBeforeForward(result: CellResult): number {
  return result.scriptCallsPerDecision - (result.perScript['release']?.callsPerDecision ?? 0);
}

function targetRows(results: readonly CellResult[], monitored: { commandsPerDecision: number } | null): TargetRow[] {
  const at = (traffic: Traffic): CellResult | undefined =>
    results.find(
      (r) => r.backends === TARGET.backends && r.promptTokens === TARGET.promptTokens && r.traffic === traffic,
    );
  const conversation = at('conversation');
  const unique = at('unique');
  const show = (r: CellResult | undefined, format: (r: CellResult) => string): string => (r ? format(r) : 'not run');
  const verdict = (ok: (r: CellResult) => boolean): string => {
    const cells = [conversation, unique].filter((r): r is CellResult => r !== undefined);
    if (cells.length === 0) return '–';
    return cells.map((r) => `${r.traffic} ${ok(r) ? '✓' : '✗'}`).join(', ');
  };
  return [
    {
      metric: 'round trips before forwarding (script calls but release)',
      target: `${TARGET.roundTrips}`,
      conversation: show(conversation, (r) => roundTripsBeforeForward(r).toFixed(2)),
      unique: show(unique, (r) => roundTripsBeforeForward(r).toFixed(2)),
      met: verdict((r) => roundTripsBeforeForward(r) <= TARGET.roundTrips),
    },
    {
      metric: 'script calls per request incl. release (commandstats)',
      target: '–',
      conversation: show(conversation, (r) => r.scriptCallsPerDecision.toFixed(2)),
      unique: show(unique, (r) => r.scriptCallsPerDecision.toFixed(2)),
      met: monitored ? `MONITOR: ${monitored.commandsPerDecision.toFixed(2)} commands/decision` : '–',
    },
    {
      metric: 'decision p50 (decide + release)',
      target: `≤ ${TARGET.p50Ms} ms`,
      conversation: show(conversation, (r) => `${ms(r.decisionMs.p50)} ms`),
      unique: show(unique, (r) => `${ms(r.decisionMs.p50)} ms`),
      met: verdict((r) => r.decisionMs.p50 <= TARGET.p50Ms),
    },
    {
      metric: 'decision p99',
      target: `≤ ${TARGET.p99Ms} ms`,
      conversation: show(conversation, (r) => `${ms(r.decisionMs.p99)} ms`),
      unique: show(unique, (r) => `${ms(r.decisionMs.p99)} ms`),
      met: verdict((r) => r.decisionMs.p99 <= TARGET.p99Ms),
    },
    {
      metric: 'decisions/s per Redis (1e6 / script µs)',
      target: `≥ ${whole(TARGET.decisionsPerSecond)}`,
      conversation: show(conversation, (r) => whole(r.decisionsPerSecondPerRedis)),
      unique: show(unique, (r) => whole(r.decisionsPerSecondPerRedis)),
      met: verdict((r) => r.decisionsPerSecondPerRedis >= TARGET.decisionsPerSecond),
    },
    {
      metric: 'decisions/s per Redis (1e6 / whole redis-server CPU µs)',
      target: `≥ ${whole(TARGET.decisionsPerSecond)}`,
      conversation: show(conversation, (r) => whole(1e6 / r.serverCpuUsecPerDecision)),
      unique: show(unique, (r) => whole(1e6 / r.serverCpuUsecPerDecision)),
      met: verdict((r) => 1e6 / r.serverCpuUsecPerDecision >= TARGET.decisionsPerSecond),
    },
  ];
}

// --- Main ------------------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const startedAt = new Date();
  let source = '';
  const server: TestRedis = await startRedis({ fresh: true, logger: (line) => (source = line) });
  const control = createRedis(server.url, 'worker');
  // The router's connection kind, with a longer timeout: a busy shared machine can stall one call past the
  // router's 50 ms, which would end the benchmark; what each call costs is measured in Redis either way.
  const requestPath = countArgumentBytes(createRedis(server.url, 'request-path', { commandTimeoutMs: 2000 }));
  const results: CellResult[] = [];
  const hashMs: Record<string, number> = {};
  let monitored: Awaited<ReturnType<typeof monitorCommandsPerDecision>> | null = null;
  let redisVersion = '';
  try {
    await waitUntilReady(control);
    await waitUntilReady(requestPath);
    const serverInfo = await control.info('server');
    redisVersion = /^redis_version:(\S+)/m.exec(serverInfo)?.[1] ?? '?';
    if (await raiseRedisPriority(serverInfo)) source += ', reniced to -20';
    const state = new RedisRoutingState({ redis: requestPath, ...STATE_DEFAULTS, nowMs: Date.now });
    const policy = createPolicy('cacheaware');
    const total = prompts.length * pools.length * 2;
    console.log(
      `Redis decision cost: redis ${redisVersion} (${source.replace(/^\[testing\] /, '')}), cacheaware, ` +
        `${BLOCK_SIZE_BYTES}-byte blocks, ${samples} decisions per cell after ${warmup} warm-up, ` +
        `${inflightPerBackend} open leases per backend, previous turns recorded ${turnGapMs / 1000} s ago`,
    );
    for (const promptTokens of prompts) {
      const workload = buildWorkload(promptTokens, warmup + samples);
      hashMs[kilo(promptTokens)] = workload.hashMsMean;
      for (const backendCount of pools) {
        const backends = backendInfos(backendCount);
        const owners = await prefill(control, backends, workload);
        const cell: Cell = { control, state, policy, backends, promptTokens };
        for (const traffic of ['conversation', 'unique'] as const) {
          const result = await measure(
            cell,
            traffic,
            traffic === 'conversation' ? workload.next : workload.unique,
            traffic === 'conversation' ? owners : null,
          );
          results.push(result);
          console.log(progressLine(results.length, total, result));
        }
      }
    }
    monitored = await monitorCommandsPerDecision(control, requestPath, state, policy);
    console.log(
      `round-trip check (MONITOR, ${monitored.decisions} decisions): ${monitored.commandsPerDecision.toFixed(2)} ` +
        `commands per decision from the request-path connection (${JSON.stringify(monitored.commands)})`,
    );
  } finally {
    await requestPath.quit();
    await control.quit();
    await server.stop();
  }

  console.log(
    `memory: recording ${memoryBlocks.toLocaleString('en-US')} blocks across ${MEMORY_BACKENDS} backends on a fresh Redis…`,
  );
  const memory = await measureMemory();
  console.log(
    `memory: ${mb(memory.usedMemoryAfter - memory.usedMemoryBefore)} for ${whole(memory.blocks)} blocks in ${memory.seconds.toFixed(1)} s`,
  );

  console.log('\n### Decision time and Redis cost per decision\n');
  for (const line of cellTable(results)) console.log(line);
  console.log(
    `\nClient hashing (buildRoutingRequest, not in decision time), mean per request: ${Object.entries(hashMs)
      .map(([size, value]) => `${size} ${ms(value)} ms`)
      .join(', ')}.`,
  );

  console.log(`\n### Targets (issue 4) at ${TARGET.backends} backends, ${kilo(TARGET.promptTokens)}-token prompts\n`);
  const targets = targetRows(results, monitored);
  console.log('| metric | target | conversation | unique | met |');
  console.log('|---|---:|---:|---:|---|');
  for (const row of targets)
    console.log(`| ${row.metric} | ${row.target} | ${row.conversation} | ${row.unique} | ${row.met} |`);

  console.log(
    `\n### Memory: ${whole(memory.blocks)} prefix blocks, ${memory.backends} backends, chains of ${memory.chainBlocks}\n`,
  );
  console.log(
    '| used_memory before | after | delta | bytes / block | used_memory_peak | used_memory_rss | owner fields | keys | Redis µs / block |',
  );
  console.log('|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  console.log(
    `| ${mb(memory.usedMemoryBefore)} | ${mb(memory.usedMemoryAfter)} | ${mb(memory.usedMemoryAfter - memory.usedMemoryBefore)} ` +
      `| ${memory.bytesPerBlock.toFixed(0)} | ` +
      `${mb(memory.usedMemoryPeak)} | ${mb(memory.usedMemoryRss)} | ${whole(memory.ownerFields)} ` +
      `| ${whole(memory.keys)} | ${memory.redisUsecPerBlock.toFixed(1)} |`,
  );

  const outDir = join(repoRoot, 'bench', 'results');
  mkdirSync(outDir, { recursive: true });
  const stamp = startedAt.toISOString().replaceAll(':', '-').slice(0, 19);
  const file = `redis-decision-${stamp}.json`;
  writeFileSync(
    join(outDir, file),
    JSON.stringify(
      {
        startedAt: startedAt.toISOString(),
        redis: { version: redisVersion, source },
        node: process.version,
        settings: {
          pools,
          prompts,
          samples,
          warmup,
          inflightPerBackend,
          turnGapMs,
          blockSizeBytes: BLOCK_SIZE_BYTES,
          systemTokens: SYSTEM_TOKENS,
          turnTokens: TURN_TOKENS,
          state: STATE_DEFAULTS,
          policy: 'cacheaware',
        },
        target: TARGET,
        cells: results,
        hashMsMean: hashMs,
        targets,
        roundTripCheck: monitored,
        memory,
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
