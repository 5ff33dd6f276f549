/**
 * Benchmark: what a proxy adds between a client and an LLM engine. One run sends the same load,
 * with the same generator (Debian's wrk + bench/wrk/chat-completions.lua), to the same vllm-sim
 * (`--profile fast`: near-zero engine time) along five paths:
 *
 *   direct         wrk → vllm-sim
 *   bare           wrk → bare Node proxy (bare-proxy.ts: Fastify 5 + undici Pool, no routing) → vllm-sim
 *   kvroute        wrk → apps/router (--policy cacheaware, routing state in memory) → vllm-sim
 *   kvroute-redis  wrk → apps/router (same, with --redis-url: routing state in a private redis-server
 *                  started here by startRedis({ fresh: true }), pinned to the client core) → vllm-sim
 *   kvroute-pd     wrk → apps/router with a prefill and a decode vllm-sim (`--pd-role`), every request split
 *                  (`--pd-min-uncached-tokens 0`): both legs per request (issue 32's acceptance 4)
 *   haproxy        wrk → HAProxy in TCP mode (one server, no HTTP parsing) → vllm-sim   [if installed]
 *
 * Four workloads: POST /v1/chat/completions with a ~100-byte or a 32 KB prompt, JSON or SSE
 * (max_tokens 16). Every prompt is different (a per-request counter comes first).
 *
 * For each workload: a short closed-loop warm-up of every path; then `--rounds` rounds of paced runs
 * at the target rate (default 500 req/s, wrk's delay() between requests of each connection) that
 * visit the paths in turn, so drift of the machine hits every path alike; the median over rounds
 * of each latency percentile, minus the direct path's, is the added latency. Then one closed-loop
 * run (no delay) per path, whose requests/s is the maximum rate. The proxy's and the sim's CPU time
 * per request during the paced runs come from /proc. The sim and the proxy under test share core 0,
 * wrk (and this script) run on core 1 (taskset), so a proxy's CPU cost shows up as lost sim
 * capacity, as on a real host. The redis-server of kvroute-redis runs on core 1 too, so it does not take
 * the proxy's core, as a Redis on another host would not; its CPU per request comes from /proc as well.
 *
 * Usage: npm run bench:overhead -- [--rate 500] [--seconds 3] [--rounds 3] [--warmup-seconds 1]
 *        [--paced-connections 50] [--max-connections 32] [--max-tokens 16]
 *        [--paths direct,bare,kvroute,kvroute-redis,haproxy] [--workloads small-json,small-sse,32k-json,32k-sse (or 128k-json)] [--no-pin]
 *        [--baseline DIR] [--baseline-args="FLAGS"]
 *
 * `--baseline DIR`: also measure the router of another checkout (a `git worktree` of the commit before a
 * change, with its `npm ci` done; its bundle is built here) as the paths kvroute-baseline and
 * kvroute-redis-baseline, beside each selected kvroute path, in the same rounds, next to it (after it in odd
 * rounds, before it in even ones), against
 * the same sim (the Redis one in database 1 of the same private Redis). The "Against the baseline" table
 * gives the change in proxy CPU per request: the before/after of a change in one sitting.
 * `--baseline-args="FLAGS"` adds router flags to the baseline paths; without `--baseline` the baseline is
 * this checkout itself, so e.g. `--baseline-args="--learn-from-responses=false --calibrate-cost-model=false
 * --request-stream-usage=false"` measures what those features cost, the same code on both sides.
 * Writes bench/results/overhead-<time>.{json,md}.
 */
import { parseCommandLine } from '@kvroute/platform/command-line';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join, resolve } from 'node:path';
import type { TestRedis } from '@kvroute/testing';
import type { LocalSim } from './local-sims';
// Pure tables and figures (no imports of its own): the help text's defaults come from it.
import {
  BASELINE_OF,
  baselineTable,
  isBaselinePath,
  PATH_IDS,
  PATH_LABELS,
  usesRedis,
  resultsTable,
  summarize,
  TARGETS,
  targetsTable,
  WORKLOADS,
  DEFAULT_WORKLOAD_IDS,
  combinePacedRounds,
  type MaxMeasurement,
  type PacedRound,
  type PathId,
  type PathResult,
  type Workload,
  type WorkloadResult,
} from './overhead-report';
import type { ProxyProcess } from './proxy-processes';
import type { WrkResult, WrkRun } from './wrk';

const args = parseCommandLine({
  usage: 'npm run bench:overhead -- [options]',
  summary:
    "What the router adds to a request's latency and CPU, path by path (direct, bare proxy, " +
    'kvroute,\nkvroute with Redis, HAProxy). Writes bench/results/overhead-<time>.json.',
  allowNegative: true,
  options: {
    rate: { type: 'string', default: '500', value: 'number', description: 'paced requests per second' },
    seconds: { type: 'string', default: '3', value: 'number', description: 'each paced run' },
    'warmup-seconds': { type: 'string', default: '1', value: 'number', description: 'closed-loop warm-up per path' },
    'paced-connections': {
      type: 'string',
      default: '50',
      value: 'number',
      description: "wrk's connections in the paced runs",
    },
    'max-connections': {
      type: 'string',
      default: '32',
      value: 'number',
      description: "wrk's connections in the closed-loop (maximum rate) runs",
    },
    rounds: {
      type: 'string',
      default: '3',
      value: 'number',
      description: 'rounds of paced runs (the median is reported)',
    },
    'max-tokens': { type: 'string', default: '16', value: 'number', description: 'max_tokens of every request' },
    model: { type: 'string', default: 'bench-model', description: 'model name the sim serves' },
    paths: {
      type: 'string',
      default: PATH_IDS.join(','),
      description: 'comma-separated paths to measure',
    },
    workloads: {
      type: 'string',
      default: DEFAULT_WORKLOAD_IDS.join(','),
      description: 'comma-separated workloads (also 128k-json)',
    },
    pin: { type: 'boolean', default: true, description: 'pin proxy and sim to core 0, wrk to core 1 (taskset)' },
    baseline: { type: 'string', description: "another checkout's router, measured beside this one" },
    'baseline-args': { type: 'string', description: 'router flags for the baseline paths (--baseline-args="FLAGS")' },
  },
});

// Loaded once the command line is accepted: --help, --version and a mistyped flag answer without them.
// A private Redis, started as the tests and bench:redis-decision do (bench is never shipped; eslint.config.mjs allows it here).
const { startRedis } = await import('@kvroute/testing');
const { pinRunningProcess, processListeningOn } = await import('./listening-process');
const { startLocalSims, stopLocalSims } = await import('./local-sims');
const { machineBusyCores, machineCpuSeconds, ownCpuSeconds, processCpuSeconds } = await import('./process-cpu');
const { newBenchKey, writeBenchKeyFile } = await import('./bench-api-keys');
const { buildBundles, haproxyVersion, lastLines, startBareProxyProcess, startHaproxyProcess, startRouterProcess } =
  await import('./proxy-processes');
const { errorCount, pacingDelayMs, requestRate, runWrk } = await import('./wrk');

const rate = Number(args.rate);
const seconds = Number(args.seconds);
const warmupSeconds = Number(args['warmup-seconds']);
const pacedConnections = Number(args['paced-connections']);
const maxConnections = Number(args['max-connections']);
const rounds = Number(args.rounds);
const maxTokens = Number(args['max-tokens']);
const model = args.model;
const repoRoot = join(import.meta.dirname, '..', '..');
/** Router flags for the baseline paths only (`--baseline-args="…"`, with '=': the value starts with a dash). */
const baselineArgs = (args['baseline-args'] ?? '').split(/\s+/).filter(Boolean);
/** The baseline's checkout: `--baseline DIR`, or this one when only `--baseline-args` is given (what a flag costs). */
const baselineDir =
  args.baseline !== undefined ? resolve(args.baseline) : baselineArgs.length > 0 ? repoRoot : undefined;
const PROXY_CORE = 0;
const CLIENT_CORE = 1;

function selectedPaths(): PathId[] {
  const wanted = args.paths.split(',').map((id) => id.trim());
  const unknown = wanted.filter((id) => !(PATH_IDS as readonly string[]).includes(id));
  if (unknown.length > 0) throw new Error(`unknown path(s) ${unknown.join(', ')}; choose from ${PATH_IDS.join(', ')}`);
  const baselines = wanted.filter((id) => isBaselinePath(id as PathId));
  if (baselineDir === undefined && baselines.length > 0)
    throw new Error(`path(s) ${baselines.join(', ')} need --baseline DIR or --baseline-args`);
  // Direct is the reference every added latency is measured against; a baseline comes with the path it is compared with.
  return PATH_IDS.filter(
    (id) =>
      id === 'direct' ||
      wanted.includes(id) ||
      (baselineDir !== undefined && isBaselinePath(id) && wanted.includes(BASELINE_OF[id])),
  );
}

function selectedWorkloads(): Workload[] {
  const wanted = args.workloads.split(',').map((id) => id.trim());
  const chosen = WORKLOADS.filter((workload) => wanted.includes(workload.id));
  const unknown = wanted.filter((id) => !WORKLOADS.some((workload) => workload.id === id));
  if (unknown.length > 0 || chosen.length === 0)
    throw new Error(
      `unknown workload(s) ${unknown.join(', ')}; choose from ${WORKLOADS.map((workload) => workload.id).join(', ')}`,
    );
  return chosen;
}

function toolVersion(command: string, versionArgs: readonly string[]): string | undefined {
  const result = spawnSync(command, versionArgs, { encoding: 'utf8' });
  if (result.error) return undefined;
  return (result.stdout || result.stderr).split('\n')[0]?.trim();
}

interface Target {
  readonly path: PathId;
  readonly url: string;
  /** The proxy process (absent for direct). */
  readonly proxy?: ProxyProcess;
  /** The API key its requests carry (`kvroute-redis-keys`). */
  readonly apiKey?: string;
}

/** The private Redis of the kvroute-redis path, and what is known of its process. */
interface BenchRedis {
  readonly redis: TestRedis;
  /** The redis-server's pid, when found (for its CPU time and pinning). */
  readonly pid?: number;
  /** Where it runs and how that was found, for the header and the results file. */
  readonly placement: string;
}

/**
 * Finds the redis-server behind a fresh startRedis() and pins it (all its threads) to the client core.
 * @kvroute/testing does not expose the pid, so it is looked up by the listening port in /proc
 * (/proc/net/tcp{,6} → socket inode → /proc/<pid>/fd), as `ss -ltnp` does.
 */
function locateRedis(redis: TestRedis, pinToCore: number | undefined): BenchRedis {
  const where = `redis-server on 127.0.0.1:${redis.port}`;
  if (redis.source !== 'local-redis-server') {
    return {
      redis,
      placement:
        `Redis from ${redis.source} (port ${redis.port}): no local redis-server process, so not pinned ` +
        `and its CPU not measured (it counts as other processes' CPU)`,
    };
  }
  const found = processListeningOn(redis.port, [process.pid]);
  if (!found)
    return {
      redis,
      placement: `${where}: its process was not found by port in /proc, so not pinned and its CPU not measured`,
    };
  if (found.command !== 'redis-server') {
    return {
      redis,
      placement: `${where}: port held by ${found.command} (pid ${found.pid}), not a redis-server, so not pinned and its CPU not measured`,
    };
  }
  const located = `${where} (pid ${found.pid}, found by its listening port in /proc)`;
  if (pinToCore === undefined) return { redis, pid: found.pid, placement: `${located}, not pinned` };
  const pinnedTo = pinRunningProcess(found.pid, pinToCore);
  return {
    redis,
    pid: found.pid,
    placement: pinnedTo.ok
      ? `${located} pinned to core ${pinToCore} with wrk (taskset -a -cp)`
      : `${located}, pinning to core ${pinToCore} failed: ${pinnedTo.error}`,
  };
}

/**
 * Whether a router with Redis routes on its local state now (`kvroute_router_state_degraded` 1: a Redis
 * call failed or took over --redis-timeout-ms) and how often it fell back so far
 * (`kvroute_router_state_degraded_transitions_total{to="degraded"}`), from its /metrics; undefined if unreadable.
 */
async function routerStateHealth(metricsUrl: string): Promise<{ degraded: boolean; fallbacks: number } | undefined> {
  try {
    const response = await fetch(`${metricsUrl}/metrics`, { signal: AbortSignal.timeout(5_000) });
    const text = await response.text();
    if (!response.ok) return undefined;
    const lines = text.split('\n');
    const value = (line: string | undefined): number =>
      line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
    return {
      degraded: value(lines.find((line) => line.startsWith('kvroute_router_state_degraded '))) === 1,
      fallbacks: value(
        lines.find(
          (line) =>
            line.startsWith('kvroute_router_state_degraded_transitions_total{') && line.includes('to="degraded"'),
        ),
      ),
    };
  } catch {
    return undefined;
  }
}

async function main(): Promise<void> {
  for (const [flag, value] of Object.entries({
    rate,
    seconds,
    'paced-connections': pacedConnections,
    'max-connections': maxConnections,
    rounds,
    'max-tokens': maxTokens,
  })) {
    if (!(value > 0)) throw new Error(`--${flag} must be a positive number`);
  }
  if (!(warmupSeconds >= 0)) throw new Error('--warmup-seconds must be 0 or more');
  // wrk takes whole seconds.
  if (!Number.isInteger(seconds) || !Number.isInteger(warmupSeconds))
    throw new Error('--seconds and --warmup-seconds must be whole seconds');
  if (!Number.isInteger(rounds)) throw new Error('--rounds must be a whole number');
  const paths = selectedPaths();
  const workloads = selectedWorkloads();
  // Proxies run as deployed: production bundles (`npm run build`), no TypeScript transform at run time.
  console.log('Building production bundles (npm run build)…');
  buildBundles();
  const baseline = baselineDir;
  if (baseline !== undefined && baseline !== repoRoot) {
    if (!existsSync(join(baseline, 'node_modules')))
      throw new Error(`--baseline ${baseline}: no node_modules there; run npm ci in it first`);
    console.log(`Building the baseline's bundles in ${baseline} (${baselineCommit(baseline)}) …`);
    buildBundles(baseline);
    if (!existsSync(join(baseline, 'dist', 'router.mjs')))
      throw new Error(`npm run build made no router in ${baseline}`);
  }
  const wrkVersion = toolVersion('wrk', ['-v'])?.replace(/\s+Copyright.*$/, '');
  if (!wrkVersion?.startsWith('wrk')) throw new Error('wrk is not installed (Debian: apt-get install wrk)');
  const pinned = args.pin && spawnSync('taskset', ['--version']).status === 0 && cpus().length >= 2;
  if (pinned) spawnSync('taskset', ['-pc', String(CLIENT_CORE), String(process.pid)], { stdio: 'ignore' });
  const placement = pinned
    ? `vllm-sim + proxy under test pinned to core ${PROXY_CORE}, wrk (and this script) to core ${CLIENT_CORE} (taskset)`
    : `not pinned (${args.pin ? 'taskset missing or fewer than 2 cores' : '--no-pin'}): every process floats over ${cpus().length} core(s)`;
  const coreOption = pinned ? { pinToCore: PROXY_CORE } : {};
  const notes: string[] = [];
  const startedAt = new Date();

  console.log(
    `Proxy overhead: wrk → {${paths.join(' | ')}} → vllm-sim --profile fast (model ${model}), POST /v1/chat/completions, max_tokens ${maxTokens}`,
  );
  console.log(
    `paced: ${rate} req/s over ${pacedConnections} connections (each waits ${pacingDelayMs(rate, pacedConnections).toFixed(0)} ` +
      `ms ±50 % between requests), ${rounds} rounds of ${seconds} s per path, interleaved; max rate: ` +
      `closed loop over ${maxConnections} connections, ${seconds} s; ${warmupSeconds} s closed-loop ` +
      `warm-up per path and workload`,
  );
  console.log(`CPU placement: ${placement}`);
  // Nothing of ours runs yet: whatever uses CPU now competes with the benchmark.
  const busyBefore = await machineBusyCores(1_000);
  if (busyBefore !== undefined && busyBefore > 0.15) {
    const warning = `other processes used ${busyBefore.toFixed(2)} cores in the second before the run: they compete with the benchmark, figures will be noisy.`;
    notes.push(warning);
    console.log(`WARNING: ${warning}`);
  }
  console.log(
    `prompts: every one different (per-request counter first, then filler), workloads ${workloads.map((workload) => workload.id).join(', ')}\n`,
  );

  let sim: LocalSim | undefined;
  /** The kvroute-pd path's prefill and decode sims. */
  const pdSims: LocalSim[] = [];
  let benchRedis: BenchRedis | undefined;
  const targets = new Map<PathId, Target>();
  const unavailable = new Map<PathId, string>();
  // Everything started is stopped on the way out: after the run, on an error, and on SIGINT / SIGTERM.
  let stopping: Promise<void> | undefined;
  const stopAll = (): Promise<void> =>
    (stopping ??= (async () => {
      await Promise.allSettled([...targets.values()].map((target) => target.proxy?.stop()));
      // After the routers (they close their Redis connections on SIGTERM).
      await benchRedis?.redis.stop().catch((error: unknown) => console.error(`stopping Redis: ${String(error)}`));
      if (sim) await stopLocalSims([sim, ...pdSims]);
    })());
  const onSignal = (signal: NodeJS.Signals): void => {
    console.error(`\n${signal}: stopping the sim, the proxies and Redis …`);
    void stopAll().finally(() => process.exit(signal === 'SIGINT' ? 130 : 143));
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    console.log('starting vllm-sim …');
    [sim] = await startLocalSims(1, ['--profile', 'fast', '--model', model], coreOption);
    if (!sim) throw new Error('no sim started');
    const simUrl = sim.url;
    /** The one private Redis of the Redis paths, started by the first of them. */
    const privateRedis = async (): Promise<TestRedis> => {
      if (benchRedis) return benchRedis.redis;
      const redis = await startRedis({ fresh: true, logger: (line) => console.log(`  ${line}`) });
      benchRedis = locateRedis(redis, pinned ? CLIENT_CORE : undefined);
      console.log(`  ${benchRedis.placement}`);
      if (benchRedis.pid === undefined) notes.push(`kvroute + Redis: ${benchRedis.placement}.`);
      return redis;
    };
    targets.set('direct', { path: 'direct', url: simUrl });
    const baselineExtraArgs = baselineArgs.length > 0 ? { extraArgs: baselineArgs } : {};
    const starters: Record<Exclude<PathId, 'direct'>, () => Promise<ProxyProcess>> = {
      bare: () => startBareProxyProcess(simUrl, coreOption),
      kvroute: () => startRouterProcess(simUrl, coreOption),
      'kvroute-baseline': () => startRouterProcess(simUrl, { ...coreOption, checkout: baseline, ...baselineExtraArgs }),
      'kvroute-redis': async () => startRouterProcess(simUrl, { ...coreOption, redisUrl: (await privateRedis()).url }),
      // Database 1: the two routers' keys never meet, and the one redis-server's CPU is measured for both.
      'kvroute-redis-baseline': async () =>
        startRouterProcess(simUrl, {
          ...coreOption,
          checkout: baseline,
          redisUrl: `${(await privateRedis()).url}/1`,
          ...baselineExtraArgs,
        }),
      // Keys and limits on (issue 14): every request is looked up (cached) and admitted by admit-tenant.lua, in database 2.
      'kvroute-redis-keys': async () =>
        startRouterProcess(simUrl, {
          ...coreOption,
          redisUrl: `${(await privateRedis()).url}/2`,
          extraArgs: keysArgs(),
        }),
      // Prefill/decode (issue 32, acceptance 4): a prefill and a decode sim of the same profile, every request split
      // (pdMinUncachedTokens 0), so the router runs both legs of each; its CPU per request against kvroute's.
      'kvroute-pd': async () => {
        for (const role of ['prefill', 'decode'])
          pdSims.push(
            ...(await startLocalSims(1, ['--profile', 'fast', '--model', model, '--pd-role', role], coreOption)),
          );
        const [prefill, decode] = pdSims as [LocalSim, LocalSim];
        return startRouterProcess('', {
          ...coreOption,
          extraArgs: [
            '--prefill-backends',
            prefill.url,
            '--decode-backends',
            decode.url,
            '--pd-min-uncached-tokens',
            '0',
          ],
        });
      },
      haproxy: async () => {
        if (!haproxyVersion()) throw new Error('HAProxy is not installed (/usr/sbin/haproxy): skipped');
        return startHaproxyProcess(simUrl, coreOption);
      },
    };
    for (const path of paths) {
      if (path === 'direct') continue;
      console.log(`starting ${PATH_LABELS[path]} …`);
      try {
        const proxy = await starters[path]();
        targets.set(path, {
          path,
          url: proxy.url,
          proxy,
          ...(path === 'kvroute-redis-keys' ? { apiKey: BENCH_KEY.secret } : {}),
        });
      } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        unavailable.set(path, message);
        notes.push(`${PATH_LABELS[path]} not measured: ${message}`);
        console.log(`  ${PATH_LABELS[path]} unavailable: ${lastLines(message, 6)}`);
      }
    }
    console.log('');

    const results: WorkloadResult[] = [];
    const clientCore = pinned ? CLIENT_CORE : undefined;
    const redisRouter = targets.get('kvroute-redis');
    // Its ops listener serves /metrics (the public port answers 404 there), as each paced round reads it.
    const redisRouterMetrics = redisRouter?.proxy?.metricsUrl ?? redisRouter?.url;
    let fallbacksSoFar =
      redisRouterMetrics === undefined ? undefined : (await routerStateHealth(redisRouterMetrics))?.fallbacks;
    let runId = 0;
    for (const [index, workload] of workloads.entries()) {
      console.log(`workload ${index + 1}/${workloads.length}: ${workload.id}`);
      const pathResults = await measureWorkload(workload, paths, targets, unavailable, {
        sim,
        redisPid: benchRedis?.pid,
        clientCore,
        nextRunId: () => ++runId,
      });
      // With Redis trouble (a call over --redis-timeout-ms, 50 ms) the router routes on local state: say so.
      if (redisRouter && redisRouterMetrics !== undefined && !redisRouter.proxy?.exited()) {
        const fallbacks = (await routerStateHealth(redisRouterMetrics))?.fallbacks;
        const kept = pathResults.find((result) => result.path === 'kvroute-redis')?.paced?.roundsOnLocalState ?? 0;
        if (fallbacks === undefined)
          notes.push(
            `${workload.id} × kvroute + Redis: could not read the router's /metrics to check it stayed on Redis state.`,
          );
        else if (fallbacks > (fallbacksSoFar ?? 0)) {
          notes.push(
            `${workload.id} × kvroute + Redis: the router fell back to its local state ${fallbacks - (fallbacksSoFar ?? 0)} ` +
              `time(s) (a Redis call failed or took over 50 ms, --redis-timeout-ms), counting warm-up, repeated ` +
              `and max-rate runs; ${kept} of the paced rounds kept ran partly on local state, not Redis.`,
          );
        }
        fallbacksSoFar = fallbacks ?? fallbacksSoFar;
      }
      for (const result of pathResults) {
        if (result.skipped && targets.has(result.path))
          notes.push(`${workload.id} × ${PATH_LABELS[result.path]}: ${result.skipped}`);
        const foreign = result.paced?.foreignCpuCoresMax;
        if (foreign !== undefined && foreign > DISTURBED_CORES) {
          notes.push(
            `${workload.id} × ${PATH_LABELS[result.path]}: other processes still used up to ${foreign.toFixed(2)} ` +
              `cores during a paced round after ${MAX_REPEATS} repeats; its figures are noisier.`,
          );
        }
      }
      results.push({ workload, paths: pathResults });
    }

    const summaries = results.map((result) => summarize(result));
    const table = resultsTable(results, rate);
    const targetTable = targetsTable(results);
    const againstBaseline = baseline === undefined ? undefined : baselineTable(results);
    const baselineLine =
      baseline === undefined
        ? undefined
        : `Baseline: the router of ${baseline} (${baselineCommit(baseline)})${baselineArgs.length > 0 ? ` with ${baselineArgs.join(' ')}` : ''}, ` +
          `measured in the same rounds next to the path it is compared with (after it in odd rounds, ` +
          `before it in even ones); change = this ÷ baseline − 1 (CPU per request: lower is better).`;
    const explanation = [
      `p50/p99: median over ${rounds} interleaved paced rounds of wrk's percentile (request written ` +
        `→ response complete, the whole stream for SSE). Added = the path's − the direct path's, at ` +
        `${rate} req/s, ms.`,
      `Targets (reported, not enforced): kvroute added p50 ≤ ${TARGETS.addedP50VsBare}× the bare ` +
        `proxy's, kvroute added p99 ≤ ${TARGETS.addedP99Ms} ms, kvroute max rate ≥ ${TARGETS.maxRateVsBare}× ` +
        `the bare proxy's; kvroute with Redis added p50 ≤ ${TARGETS.redisAddedP50Ms} ms at ${rate} ` +
        `req/s (kvroute + Redis − kvroute: what Redis state costs over local state).`,
      `Max rate: closed loop over ${maxConnections} connections; the sim shares core 0 with the proxy, so it is the rate of sim + proxy on one core.`,
      `CPU µs/req: CPU time of the process during the paced runs ÷ requests (10 ms tick resolution); ` +
        `proxy + sim CPU = their CPU time ÷ wall time (when pinned: how busy core 0 was). Redis CPU: ` +
        `the private redis-server of kvroute + Redis, on the client core, not in that figure.`,
      ...(benchRedis ? [`kvroute + Redis: ${benchRedis.placement}.`] : []),
    ];
    console.log('\n## Results\n');
    console.log(table);
    console.log('\n## Against the targets\n');
    console.log(targetTable);
    if (againstBaseline !== undefined)
      console.log(`\n## Against the baseline\n\n${baselineLine}\n\n${againstBaseline}`);
    console.log('');
    for (const line of explanation) console.log(line);
    if (notes.length > 0) {
      console.log('\nNotes:');
      for (const note of notes) console.log(`- ${note}`);
    }

    const environment = {
      node: process.version,
      cpu: cpus()[0]?.model ?? 'unknown',
      cores: cpus().length,
      wrk: wrkVersion,
      haproxy: haproxyVersion()?.replace(/\s+-\s+https?:.*$/, '') ?? 'HAProxy not installed',
      placement,
      redis: benchRedis
        ? {
            source: benchRedis.redis.source,
            port: benchRedis.redis.port,
            pid: benchRedis.pid ?? null,
            placement: benchRedis.placement,
            version: toolVersion('redis-server', ['--version']) ?? null,
          }
        : null,
      otherCpuCoresAtStart: busyBefore ?? null,
    };
    const config = {
      rate,
      seconds,
      rounds,
      warmupSeconds,
      pacedConnections,
      pacedDelayMs: pacingDelayMs(rate, pacedConnections),
      maxConnections,
      maxTokens,
      model,
      paths,
      workloads,
      pinned,
      baseline: baseline === undefined ? null : { dir: baseline, commit: baselineCommit(baseline), args: baselineArgs },
    };
    const outDir = join(repoRoot, 'bench', 'results');
    mkdirSync(outDir, { recursive: true });
    const stamp = startedAt.toISOString().replaceAll(':', '-').slice(0, 19);
    writeFileSync(
      join(outDir, `overhead-${stamp}.json`),
      JSON.stringify(
        {
          startedAt: startedAt.toISOString(),
          finishedAt: new Date().toISOString(),
          config,
          environment,
          targets: TARGETS,
          results,
          summaries,
          notes,
        },
        null,
        2,
      ),
    );
    const markdown = [
      `# Proxy overhead, ${startedAt.toISOString()}`,
      '',
      `wrk → {${paths.join(' | ')}} → vllm-sim --profile fast; POST /v1/chat/completions, max_tokens ` +
        `${maxTokens}; paced ${rate} req/s over ${pacedConnections} connections (${rounds} interleaved ` +
        `rounds), max rate closed loop over ${maxConnections} connections, ${seconds} s per run.`,
      '',
      `CPU placement: ${placement}. Node ${environment.node}, ${environment.cpu} × ${environment.cores}, ${environment.wrk}, ${environment.haproxy}.`,
      '',
      '## Results',
      '',
      table,
      '',
      '## Against the targets',
      '',
      targetTable,
      '',
      ...(againstBaseline === undefined ? [] : ['## Against the baseline', '', baselineLine, '', againstBaseline, '']),
      ...explanation.map((line) => `- ${line}`),
      ...(notes.length > 0 ? ['', '## Notes', '', ...notes.map((note) => `- ${note.replaceAll('\n', ' ')}`)] : []),
      '',
    ].join('\n');
    writeFileSync(join(outDir, `overhead-${stamp}.md`), markdown);
    console.log(`\nresults written to bench/results/overhead-${stamp}.json and .md`);
  } finally {
    await stopAll();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
  }
}

interface MeasureContext {
  readonly sim: LocalSim;
  /** The redis-server of kvroute-redis, when running and found: its CPU is kvroute-redis's Redis CPU, and ours for every path. */
  readonly redisPid: number | undefined;
  /** Core to pin wrk to, if pinning. */
  readonly clientCore: number | undefined;
  readonly nextRunId: () => number;
}

/** What is known about one path while its workload is measured. */
interface PathRun {
  readonly target: Target;
  readonly paced: PacedRound[];
  readonly wrk: { paced: WrkResult[]; max?: WrkResult };
  max?: MaxMeasurement;
  failure?: string;
}

/**
 * One workload on every path: a closed-loop warm-up per path, then `rounds` rounds of paced runs
 * that visit the paths in turn (so slow drift of the machine hits all paths alike), then one
 * closed-loop max-rate run per path.
 */
async function measureWorkload(
  workload: Workload,
  paths: readonly PathId[],
  targets: ReadonlyMap<PathId, Target>,
  unavailable: ReadonlyMap<PathId, string>,
  context: MeasureContext,
): Promise<PathResult[]> {
  const base = {
    workload: { model, promptBytes: workload.promptBytes, maxTokens, stream: workload.stream },
    ...(context.clientCore === undefined ? {} : { core: context.clientCore }),
  };
  const label = (path: PathId): string => `  ${workload.id.padEnd(10)} ${PATH_LABELS[path].padEnd(16)}`;
  const runs = new Map<PathId, PathRun>();
  for (const path of paths) {
    const target = targets.get(path);
    if (!target) {
      console.log(`${label(path)} skipped: ${firstLine(unavailable.get(path) ?? 'not started')}`);
      continue;
    }
    const problem = exitNote(target) ?? (await preflight(target.url, workload, target.apiKey));
    if (problem) {
      console.log(`${label(path)} skipped: ${firstLine(problem)}`);
      runs.set(path, { target, paced: [], wrk: { paced: [] }, failure: problem });
      continue;
    }
    runs.set(path, { target, paced: [], wrk: { paced: [] } });
  }
  const live = (): PathRun[] => [...runs.values()].filter((run) => run.failure === undefined);
  /** Runs one step of a path; a failure (wrk error, dead proxy) takes the path out of the rest. */
  const attempt = async (run: PathRun, what: string, step: () => Promise<void>): Promise<void> => {
    try {
      await step();
    } catch (error) {
      run.failure = exitNote(run.target) ?? `${what}: ${error instanceof Error ? error.message : String(error)}`;
      console.log(`${label(run.target.path)} failed: ${firstLine(run.failure)}`);
    }
  };

  if (warmupSeconds > 0) {
    for (const run of live()) {
      await attempt(run, 'warm-up', async () => {
        await runWrk({
          ...base,
          url: chatUrl(run.target),
          ...keyOf(run.target),
          connections: maxConnections,
          seconds: warmupSeconds,
          runId: context.nextRunId(),
        });
      });
    }
  }
  /**
   * One wrk run with the CPU accounting of measuredRun, repeated (MAX_REPEATS times at most) while
   * other processes took more than DISTURBED_CORES of CPU meanwhile.
   */
  const undisturbed = async (
    run: PathRun,
    what: string,
    wrkRun: Omit<WrkRun, 'url' | 'runId'>,
    describe: (round: PacedRound) => string,
  ): Promise<PacedRound> => {
    for (let repeat = 0; ; repeat++) {
      const measured = await measuredRun(
        run.target,
        { ...wrkRun, url: chatUrl(run.target), ...keyOf(run.target), runId: context.nextRunId() },
        context,
      );
      const foreign = measured.foreignCpuCores ?? 0;
      // A kvroute + Redis round that ran (partly) on the router's local state did not measure Redis: repeat it too.
      const why = [
        ...(foreign > DISTURBED_CORES ? [`other processes used ${foreign.toFixed(2)} cores`] : []),
        ...(measured.onLocalState ? ['the router routed on local state (Redis degraded)'] : []),
      ];
      const again = why.length > 0 && repeat < MAX_REPEATS;
      console.log(
        `${label(run.target.path)} ${what}: ${describe(measured)}${why.length > 0 ? ` — disturbed: ${why.join(', ')}${again ? ', repeating' : ''}` : ''}`,
      );
      if (!again) return measured;
    }
  };

  for (let round = 1; round <= rounds; round++) {
    for (const run of visitOrder(live(), round)) {
      await attempt(run, `paced round ${round}`, async () => {
        const measured = await undisturbed(
          run,
          `paced ${rate}/s, round ${round}/${rounds}`,
          { ...base, connections: pacedConnections, seconds, rate },
          ({ wrk: result, proxyCpuSeconds, redisCpuSeconds }) => {
            const perRequest = (cpuSeconds: number): string =>
              ((cpuSeconds * 1e6) / Math.max(1, result.requests)).toFixed(0);
            const proxyCpu = proxyCpuSeconds === undefined ? '' : `, proxy ${perRequest(proxyCpuSeconds)} µs CPU/req`;
            const redisCpu = redisCpuSeconds === undefined ? '' : `, Redis ${perRequest(redisCpuSeconds)} µs CPU/req`;
            return (
              `${result.requests} req (${requestRate(result).toFixed(0)}/s), p50 ${(result.latencyUs.p50 / 1000).toFixed(3)} ` +
              `ms, p99 ${(result.latencyUs.p99 / 1000).toFixed(3)} ms, ${errorCount(result.errors)} errors${proxyCpu}${redisCpu}`
            );
          },
        );
        run.wrk.paced.push(measured.wrk);
        run.paced.push(measured);
      });
    }
  }
  for (const run of live()) {
    await attempt(run, 'max-rate run', async () => {
      const { wrk: result } = await undisturbed(
        run,
        'max',
        { ...base, connections: maxConnections, seconds },
        ({ wrk: max }) =>
          `${requestRate(max).toFixed(0)} req/s (p50 ${(max.latencyUs.p50 / 1000).toFixed(2)} ms, ${errorCount(max.errors)} errors)`,
      );
      run.wrk.max = result;
      run.max = {
        rate: requestRate(result),
        p50Ms: result.latencyUs.p50 / 1000,
        p99Ms: result.latencyUs.p99 / 1000,
        errors: errorCount(result.errors),
      };
    });
  }

  return paths.map((path): PathResult => {
    const run = runs.get(path);
    if (!run) return { path, skipped: firstLine(unavailable.get(path) ?? 'not started') };
    const completed = run.paced.reduce((sum, round) => sum + round.wrk.requests, 0);
    const paced = completed > 0 ? combinePacedRounds(run.paced) : undefined;
    if (!paced && !run.failure) run.failure = 'no request completed in the paced runs';
    const errors = (paced?.errors ?? 0) + (run.max?.errors ?? 0);
    const skipped = run.failure ?? (errors > 0 ? `${errors} wrk errors (status > 399, socket or timeout)` : undefined);
    return {
      path,
      ...(paced ? { paced } : {}),
      ...(run.max ? { max: run.max } : {}),
      ...(skipped ? { skipped } : {}),
      wrk: run.wrk,
    };
  });
}

/**
 * The paths of one round, in order; in every even round each path and its baseline swap places, so
 * neither of a compared pair always runs first (the first path after another one measured higher in
 * the same run for identical code: up to +72 % in a first round).
 */
function visitOrder(runs: readonly PathRun[], round: number): PathRun[] {
  const order = [...runs];
  if (round % 2 === 1) return order;
  for (let index = 0; index + 1 < order.length; index++) {
    const [first, second] = [order[index] as PathRun, order[index + 1] as PathRun];
    if (isBaselinePath(second.target.path) && BASELINE_OF[second.target.path] === first.target.path) {
      order[index] = second;
      order[index + 1] = first;
      index++;
    }
  }
  return order;
}

/** Other processes' CPU above which a paced round is repeated (in cores), and how often at most. */
const DISTURBED_CORES = 0.15;
const MAX_REPEATS = 2;

/** One wrk run, with the CPU the sim, the proxy, Redis and everything else used meanwhile. */
async function measuredRun(target: Target, run: WrkRun, context: MeasureContext): Promise<PacedRound> {
  const simPid = context.sim.process.pid ?? 0;
  const proxyPid = target.proxy?.process.pid;
  const redisPid = context.redisPid;
  const simBefore = processCpuSeconds(simPid);
  const proxyBefore = proxyPid === undefined ? 0 : processCpuSeconds(proxyPid);
  // Read before the CPU snapshots and after, so the router's work on /metrics is outside the figures.
  const withRedis = usesRedis(target.path) && target.proxy !== undefined;
  const metricsUrl = target.proxy?.metricsUrl ?? target.url;
  const healthBefore = withRedis ? await routerStateHealth(metricsUrl) : undefined;
  const redisBefore = redisPid === undefined ? 0 : processCpuSeconds(redisPid);
  const ownBefore = ownCpuSeconds();
  const machineBefore = machineCpuSeconds();
  const wallBefore = performance.now();
  const result = await runWrk(run);
  const wallSeconds = (performance.now() - wallBefore) / 1000;
  const machineAfter = machineCpuSeconds();
  const dead = exitNote(target);
  if (dead) throw new Error(dead);
  const simCpuSeconds = processCpuSeconds(simPid) - simBefore;
  const proxyCpuSeconds = proxyPid === undefined ? undefined : processCpuSeconds(proxyPid) - proxyBefore;
  // Idle (a few ticks of serverCron) on the other paths, but ours all the same.
  const anyRedisCpuSeconds = redisPid === undefined ? 0 : processCpuSeconds(redisPid) - redisBefore;
  const redisCpuSeconds = usesRedis(target.path) && redisPid !== undefined ? anyRedisCpuSeconds : undefined;
  const ours = simCpuSeconds + (proxyCpuSeconds ?? 0) + anyRedisCpuSeconds + (ownCpuSeconds() - ownBefore);
  const healthAfter = withRedis ? await routerStateHealth(metricsUrl) : undefined;
  // Unknown (unreadable /metrics) counts as on Redis: the workload's note says /metrics could not be read.
  const onLocalState =
    withRedis && healthBefore !== undefined && healthAfter !== undefined
      ? healthBefore.degraded || healthAfter.degraded || healthAfter.fallbacks > healthBefore.fallbacks
      : undefined;
  const foreignCpuCores =
    machineBefore && machineAfter
      ? Math.max(0, machineAfter.busy - machineBefore.busy - ours + (machineAfter.steal - machineBefore.steal)) /
        wallSeconds
      : undefined;
  return {
    wrk: result,
    simCpuSeconds,
    ...(proxyCpuSeconds === undefined ? {} : { proxyCpuSeconds }),
    ...(redisCpuSeconds === undefined ? {} : { redisCpuSeconds }),
    ...(onLocalState === undefined ? {} : { onLocalState }),
    wallSeconds,
    ...(foreignCpuCores === undefined ? {} : { foreignCpuCores }),
  };
}

/**
 * The key of the `kvroute-redis-keys` path, made for this run: its key file holds the digest, with limits
 * of every kind (requests, tokens, concurrency) far above what the run sends, so that each is checked and
 * none refuses.
 */
const BENCH_KEY = newBenchKey('bench', {
  requestsPerMinute: 100_000_000,
  tokensPerMinute: 1_000_000_000,
  concurrentRequests: 100_000,
});

function keysArgs(): string[] {
  return ['--auth', 'api-keys', '--api-keys-file', writeBenchKeyFile([BENCH_KEY]), '--routing-headers', 'all'];
}

/** The wrk option that makes a run send the target's API key, if it has one. */
function keyOf(target: Target): { apiKey?: string } {
  return target.apiKey === undefined ? {} : { apiKey: target.apiKey };
}

function chatUrl(target: Target): string {
  return `${target.url}/v1/chat/completions`;
}

/** Why the target's proxy process is gone, with its last output; undefined while it runs. */
function exitNote(target: Target): string | undefined {
  const exited = target.proxy?.exited();
  return exited ? `${target.proxy?.name} ${exited}: ${lastLines(target.proxy?.output() ?? '', 6)}` : undefined;
}

/** One request of the workload, JSON and SSE checked for shape, so a broken path is skipped, not measured. */
async function preflight(baseUrl: string, workload: Workload, apiKey: string | undefined): Promise<string | undefined> {
  const content = `preflight ${'x'.repeat(Math.max(0, workload.promptBytes - 10))}`;
  const body = JSON.stringify({
    model,
    messages: [{ role: 'user', content }],
    max_tokens: maxTokens,
    stream: workload.stream,
  });
  try {
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      ...(apiKey === undefined ? {} : { authorization: `Bearer ${apiKey}` }),
    };
    const response = await fetch(`${baseUrl}/v1/chat/completions`, {
      method: 'POST',
      headers,
      body,
      signal: AbortSignal.timeout(10_000),
    });
    const text = await response.text();
    if (response.status !== 200) return `preflight request answered ${response.status}: ${text.slice(0, 300)}`;
    if (workload.stream) {
      if (!text.includes('data: [DONE]')) return `preflight SSE response has no data: [DONE]: ${text.slice(0, 300)}`;
    } else {
      const parsed = JSON.parse(text) as { choices?: unknown[] };
      if (!Array.isArray(parsed.choices) || parsed.choices.length === 0)
        return `preflight JSON response has no choices: ${text.slice(0, 300)}`;
    }
    return undefined;
  } catch (error) {
    return `preflight request failed: ${error instanceof Error ? error.message : String(error)}`;
  }
}

/** The baseline checkout's commit, short, with `+changes` when its tree differs from it. */
function baselineCommit(dir: string): string {
  const head = spawnSync('git', ['-C', dir, 'rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).stdout.trim();
  const dirty =
    spawnSync('git', ['-C', dir, 'status', '--porcelain', '--untracked-files=no'], {
      encoding: 'utf8',
    }).stdout.trim() !== '';
  return head === '' ? 'not a git checkout' : `${head}${dirty ? '+changes' : ''}`;
}

function firstLine(text: string): string {
  return text.split('\n')[0] ?? text;
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
