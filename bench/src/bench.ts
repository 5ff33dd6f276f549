/**
 * `npm run bench -- --scenario NAME [options]`: compares routing policies on one workload.
 *
 * Local (default): starts the scenario's cluster (vllm-sim backends, Redis, poller, routers per run),
 * computes each workload's compulsory-miss bound (a replay on one infinite-cache sim), runs every
 * sweep value × seed × policy on cold caches (`oracle` and `oracle-cost`: the bench-side oracle router),
 * prints the tables and writes results.json, report.md and report.html to `--out` (default
 * `bench/results/<scenario>-<time>/`).
 * Real deployment: `--router URL|policy=URL,… --backends URL,…` drives routers someone else runs and
 * reads the backends' own metrics; `--router-redis URL` clears the routers' shared routing state in
 * their Redis before each run (see docs/benchmarking.md).
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { parseCommandLine } from '@kvroute/platform/command-line';
import { resultsDir } from './app-process';
import type { RunTarget } from './runner/run-scenario';

const USAGE = `npm run bench -- --scenario NAME|FILE [options]

  --scenario NAME      bench/scenarios/NAME.yaml, or a path to a scenario file
  --policies a,b       override the scenario's policies (kvroute's, and on a local cluster the
                       bench-side oracle and oracle-cost)
  --seeds 1,2,3        override the scenario's seeds
  --sweep 4,8          override the sweep values
  --out DIR            where results.json, report.md and report.html go
  --data-dir DIR       where trace files are (default ../shared/data beside the checkout)
  --write-trace FILE   write the workload of the first seed and sweep value as a JSONL trace and exit
  --router LIST        real deployment: router URLs, or policy=URL pairs (one deployment per policy)
  --backends LIST      real deployment: the backends' URLs (their /metrics give the hit-rate truth)
  --reset-cache        real deployment: POST /reset_prefix_cache to every backend before each run
                       (vLLM needs VLLM_SERVER_DEV_MODE=1; --salt-runs needs nothing)
  --salt-runs          every run's requests carry a cache_salt of their own, so each run starts cold
                       on the engines (vLLM's prefix cache is partitioned by salt) and in the routers'
                       index (the salt is in the routing text) without any development endpoint
  --router-ops-port N[,N…]  real deployment: the routers' ops ports, where their /metrics is: one for all,
                       or one per --router URL in its order (default 9464)
  --router-redis URL   real deployment: the Redis the routers share (redis://, rediss:// or redis+cluster://); their
                       routing state (prefix ownership, leases) is deleted there before each run
  --ignore-eos         send ignore_eos: true (real vLLM: every reply is exactly max_tokens long)`;

const repoRoot = join(import.meta.dirname, '..', '..');
const resultsRoot = resultsDir();

const args = parseCommandLine({
  usage: 'npm run bench -- --scenario NAME|FILE [options]',
  helpText: `${USAGE}\n  -h, --help           this text\n  --version            the version and commit of this build`,
  options: {
    scenario: { type: 'string' },
    policies: { type: 'string' },
    seeds: { type: 'string', value: 'numbers' },
    sweep: { type: 'string', value: 'numbers' },
    out: { type: 'string' },
    'data-dir': { type: 'string', default: join(repoRoot, '..', 'shared', 'data') },
    'write-trace': { type: 'string' },
    router: { type: 'string' },
    backends: { type: 'string' },
    'reset-cache': { type: 'boolean', default: false },
    'salt-runs': { type: 'boolean', default: false },
    'router-redis': { type: 'string' },
    'router-ops-port': { type: 'string' },
    'ignore-eos': { type: 'boolean', default: false },
  },
});

// Loaded once the command line is accepted: --help, --version and a mistyped flag answer without them.
const { terminalReport } = await import('./report');
const { LocalCluster } = await import('./runner/local-cluster');
const { ProgressBar } = await import('./runner/progress');
const { parseRouterList, RemoteTarget } = await import('./runner/remote-target');
const { parseRedisUrl } = await import('./runner/router-state');
const { runScenario } = await import('./runner/run-scenario');
const { loadScenario, sweepValues, workloadFor } = await import('./runner/scenario');
const { writeReports } = await import('./runner/write-reports');
const { createClientAgent } = await import('./runner/request-client');
const { eventsToJsonl, sessionEvents } = await import('./workloads');

const list = (text: string | undefined): string[] | undefined =>
  text
    ?.split(',')
    .map((part) => part.trim())
    .filter(Boolean);
/** A TCP port flag's value (1–65535), or a one-line error naming the flag. */
function portOf(text: string, flag = '--router-ops-port'): number {
  const port = Number(text);
  if (!Number.isInteger(port) || port < 1 || port > 65_535)
    throw new Error(`${flag}: ${JSON.stringify(text)} is not a port (1-65535)`);
  return port;
}
const numbers = (text: string | undefined, flag: string): number[] | undefined =>
  list(text)?.map((part) => {
    const value = Number(part);
    if (!Number.isFinite(value)) throw new Error(`--${flag}: ${JSON.stringify(part)} is not a number`);
    return value;
  });

const log = (line: string): void => void process.stderr.write(`${line}\n`);

async function main(): Promise<void> {
  if (!args.scenario) {
    process.stderr.write('npm run bench: --scenario NAME|FILE is required (see --help)\n');
    process.exitCode = 2;
    return;
  }
  const routerRedisUrl =
    args['router-redis'] === undefined ? undefined : parseRedisUrl(args['router-redis'], '--router-redis');
  if (routerRedisUrl && !args.router)
    throw new Error('--router-redis: only with --router (a local run clears its own Redis)');
  const scenario = await loadScenario(args.scenario);
  const seeds = numbers(args.seeds, 'seeds');
  const sweep = numbers(args.sweep, 'sweep');
  const workloadInputs = {
    timeScale: scenario.cluster.timeScale,
    dataDir: resolve(args['data-dir']),
    readText: (path: string) => readFile(path, 'utf8'),
  };

  if (args['write-trace']) {
    const workload = await workloadFor(scenario, {
      ...workloadInputs,
      seed: (seeds ?? scenario.seeds)[0] as number,
      sweepValue: (sweep ?? sweepValues(scenario))[0] as number,
    });
    const events = workload.kind === 'sessions' ? sessionEvents(workload.sessions) : workload.events;
    await writeFile(args['write-trace'], eventsToJsonl(events));
    log(`${events.length} requests written to ${args['write-trace']}`);
    return;
  }

  const agent = createClientAgent();
  let target: RunTarget & { close?: () => Promise<void> };
  if (args.router) {
    const backendUrls = list(args.backends) ?? [];
    if (backendUrls.length === 0) log('no --backends: hit rates come from the responses only (no backend counters)');
    target = new RemoteTarget({
      routers: parseRouterList(args.router),
      backendUrls,
      resetCache: args['reset-cache'],
      routerRedisUrl,
      ...(args['router-ops-port'] === undefined
        ? {}
        : { routerOpsPorts: (list(args['router-ops-port']) ?? []).map((port) => portOf(port)) }),
      log,
    });
  } else {
    target = await LocalCluster.start(scenario, { redisUrl: process.env['KVROUTE_REDIS_URL'], log });
  }
  const stopOnSignal = (): void => {
    log('interrupted: stopping the cluster');
    // Requests in flight first, so the routers have nothing to wait for when they are told to stop.
    void agent
      .destroy()
      .then(() => target.close?.())
      .finally(() => process.exit(130));
  };
  process.once('SIGINT', stopOnSignal);
  process.once('SIGTERM', stopOnSignal);
  try {
    const results = await runScenario(scenario, {
      target,
      agent,
      progress: new ProgressBar({
        isTTY: process.stderr.isTTY === true,
        write: (text) => void process.stderr.write(text),
      }),
      workloadInputs,
      log,
      policies: list(args.policies),
      seeds,
      sweepValues: sweep,
      extraBody: args['ignore-eos'] ? { ignore_eos: true } : undefined,
      saltRuns: args['salt-runs'],
    });
    const outDir = resolve(
      args.out ?? join(resultsRoot, `${scenario.name}-${new Date().toISOString().replace(/[:.]/g, '-')}`),
    );
    const written = await writeReports(outDir, scenario, results, { mode: args.router ? 'remote' : 'local' });
    process.stdout.write(`\n${terminalReport(written.summary)}`);
    log(`\nresults: ${written.json}\nreport:  ${written.markdown}, ${written.html}`);
  } finally {
    await target.close?.();
    await agent.close();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`bench: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
