/**
 * A local cluster for one scenario, as child processes on loopback: Redis (KVROUTE_REDIS_URL, else a
 * private `redis-server`, else none: the in-memory store with one router), N vllm-sim backends, the
 * health poller, and, per run, the scenario's router replicas with the run's policy. A run of the
 * `oracle` or `oracle-cost` gets one oracle router instead (bench/src/oracle: it asks every sim's
 * /sim/match itself and uses neither Redis nor the poller), started with `--rule <policy>` and the
 * scenario's `routerByPolicy.<policy>` keys; `oracle-cost` first takes cacheaware's keys (and
 * `blockSizeBytes`) from `router` and `routerByPolicy.cacheaware`, so it weighs costs as cacheaware's runs do.
 * For the compulsory-miss bound (compulsory-bound.ts) it starts one more vllm-sim when first asked,
 * with the backends' profile and sim keys, an effectively infinite KV cache and a huge time scale.
 *
 * Backends, Redis and the poller live for the whole scenario; `startRun` makes every run start cold
 * (each sim forgets its prefix cache, the pools' routing state is deleted from Redis, routers are new
 * processes) and `endRun` stops that run's routers. `close` stops everything in reverse order.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { toFlagName } from '@kvroute/platform';
import { clearPoolState, createRedis, waitUntilReady, type RedisClient } from '@kvroute/redis-store';
import { startLocalRedisServer, type LocalRedisServer } from '@kvroute/testing';
import type { Agent } from 'undici';
import { nodeArgsFor } from '../app-process';
import {
  freePort,
  startLocalRouter,
  startLocalSims,
  stopLocalProcess,
  startOwnListener,
  stopLocalSims,
  type LocalRouter,
  type LocalSim,
} from '../local-sims';
import { CACHE_AWARE_SETTING_KEYS } from '../oracle/oracle-config';
import { startOracleProcess } from '../oracle/oracle-process';
import { ORACLE_COST_POLICY, ORACLE_POLICIES, type SeedBound } from '../report';
import { BOUND_SIM_TIME_SCALE, CompulsoryBound, type BoundReplayHooks, type BoundSimHandle } from './compulsory-bound';
import type { RunTarget } from './run-scenario';
import type { Scenario, Workload } from './scenario';

type Scalar = string | number | boolean;

/** `{ timeScale: 2, debugRoutes: false }` → `['--time-scale', '2', '--debug-routes=false']` (a boolean flag takes no separate value). */
export function configFlags(values: Readonly<Record<string, Scalar>>): string[] {
  return Object.entries(values).flatMap(([key, value]) =>
    typeof value === 'boolean' ? [`--${toFlagName(key)}=${value}`] : [`--${toFlagName(key)}`, String(value)],
  );
}

export type RedisSource = 'env' | 'local-redis-server' | 'none';

export interface LocalClusterOptions {
  /** KVROUTE_REDIS_URL: an existing Redis to use (its kvroute pool keys are deleted between runs). */
  readonly redisUrl?: string;
  /** Progress and warnings. */
  readonly log: (line: string) => void;
}

/**
 * The oracle router's flags for a run of `policy` (`oracle` or `oracle-cost`): the rule, then for
 * oracle-cost cacheaware's keys and blockSizeBytes as the cacheaware runs have them, then the policy's own keys.
 */
export function oracleFlags(scenario: Scenario, policy: string): string[] {
  const { router, routerByPolicy } = scenario.cluster;
  const inherited: Record<string, Scalar> = {};
  if (policy === ORACLE_COST_POLICY) {
    for (const source of [router, routerByPolicy['cacheaware'] ?? {}]) {
      for (const [key, value] of Object.entries(source))
        if (key === 'blockSizeBytes' || CACHE_AWARE_SETTING_KEYS.includes(key)) inherited[key] = value;
    }
  }
  return ['--rule', policy, ...configFlags({ ...inherited, ...routerByPolicy[policy] })];
}

export class LocalCluster implements RunTarget {
  private routers: LocalRouter[] = [];
  private bound: CompulsoryBound | undefined;

  private constructor(
    private readonly scenario: Scenario,
    readonly sims: readonly LocalSim[],
    readonly redisUrl: string | undefined,
    readonly redisSource: RedisSource,
    private readonly redisServer: LocalRedisServer | undefined,
    private readonly redis: RedisClient | undefined,
    private readonly poller: ChildProcess | undefined,
    /** Router replicas per run (1 when Redis is missing). */
    readonly routerCount: number,
    private readonly log: (line: string) => void,
  ) {}

  static async start(scenario: Scenario, options: LocalClusterOptions): Promise<LocalCluster> {
    const { cluster } = scenario;
    let redisUrl: string | undefined;
    let redisSource: RedisSource = 'none';
    let redisServer: LocalRedisServer | undefined;
    if (cluster.redis) {
      if (options.redisUrl) {
        redisUrl = options.redisUrl;
        redisSource = 'env';
      } else {
        try {
          redisServer = await startLocalRedisServer();
          redisUrl = redisServer.url;
          redisSource = 'local-redis-server';
        } catch (error) {
          options.log(
            `no Redis (KVROUTE_REDIS_URL unset, redis-server failed: ${(error as Error).message}): one router with in-memory state`,
          );
        }
      }
    }
    const routerCount = redisUrl ? cluster.routers : 1;
    const simArgs = [
      '--profile',
      cluster.profile,
      '--time-scale',
      String(cluster.timeScale),
      ...(cluster.tokenizer === undefined ? [] : ['--tokenizer', cluster.tokenizer]),
      ...configFlags(cluster.sim),
    ];
    options.log(
      `starting ${cluster.backends} vllm-sim backends (${cluster.profile}, time-scale ${cluster.timeScale})` +
        (redisUrl ? `, Redis ${redisSource === 'env' ? redisUrl : '(local redis-server)'}` : ''),
    );
    const sims = await startLocalSims(cluster.backends, simArgs, { kvEvents: cluster.kvEvents });
    let redis: RedisClient | undefined;
    let poller: ChildProcess | undefined;
    try {
      if (redisUrl) {
        redis = createRedis(redisUrl, 'worker');
        await waitUntilReady(redis);
        if (cluster.poller) poller = await startPoller(redisUrl, sims);
      }
    } catch (error) {
      redis?.disconnect();
      await stopLocalSims(sims);
      await redisServer?.stop();
      throw error;
    }
    return new LocalCluster(
      scenario,
      sims,
      redisUrl,
      redisSource,
      redisServer,
      redis,
      poller,
      routerCount,
      options.log,
    );
  }

  get backendUrls(): string[] {
    return this.sims.map((sim) => sim.url);
  }

  /** Every router policy runs here, and `oracle` and `oracle-cost` (the sims answer /sim/match). */
  supports(_policy: string): boolean {
    return true;
  }

  /** The compulsory-miss bound of `workload` (its replay through the bound sim, started on first use). */
  async compulsoryBound(
    workload: Workload,
    seed: number,
    hooks: BoundReplayHooks & { readonly agent: Agent },
  ): Promise<SeedBound> {
    this.bound ??= new CompulsoryBound({
      startSim: (blocks) => this.startBoundSim(blocks),
      agent: hooks.agent,
      log: this.log,
    });
    return this.bound.compute(workload, seed, hooks);
  }

  /** The bound's replay sim: the backends' profile and sim keys, `numGpuBlocks` KV blocks, BOUND_SIM_TIME_SCALE. */
  private async startBoundSim(numGpuBlocks: number): Promise<BoundSimHandle> {
    const { cluster } = this.scenario;
    const [sim] = await startLocalSims(1, [
      '--profile',
      cluster.profile,
      // One engine: the bound is what one infinite cache would hit, whatever ranks the backends have.
      ...configFlags({ ...cluster.sim, dataParallelSize: 1, timeScale: BOUND_SIM_TIME_SCALE, numGpuBlocks }),
    ]);
    if (!sim) throw new Error('the bound sim did not start');
    return { url: sim.url, numGpuBlocks, stop: () => stopLocalSims([sim]) };
  }

  /** Cold caches and fresh routers with `policy` (for `oracle` and `oracle-cost`: one oracle router); returns the router URLs. */
  async startRun(policy: string, routers: number = this.routerCount): Promise<string[]> {
    await Promise.all(
      this.sims.map(async (sim) => {
        const response = await fetch(`${sim.url}/sim/reset-cache`, { method: 'POST' });
        if (!response.ok) throw new Error(`${sim.url}/sim/reset-cache answered ${response.status}`);
      }),
    );
    if (ORACLE_POLICIES.includes(policy)) {
      // One replica whatever the scenario asks: the oracle counts in-flight requests in its own process.
      this.routers.push(await startOracleProcess(this.backendUrls, oracleFlags(this.scenario, policy)));
      return this.routers.map((router) => router.url);
    }
    if (this.redis) await clearPoolState(this.redis);
    const { tokenizer: simTokenizer, tokenMode } = this.scenario.cluster;
    const tokenizer = tokenMode ? simTokenizer : undefined;
    const args = [
      '--policy',
      policy,
      ...(this.redisUrl ? ['--redis-url', this.redisUrl] : []),
      ...(tokenizer === undefined ? [] : ['--tokenizer', tokenizer]),
      ...configFlags({ ...this.scenario.cluster.router, ...this.scenario.cluster.routerByPolicy[policy] }),
    ];
    // Sims serving data-parallel ranks (sim key dataParallelSize): the router routes to each rank, which
    // only a config file can say of a backend.
    const ranks = this.scenario.cluster.routeRanks ? Number(this.scenario.cluster.sim['dataParallelSize'] ?? 1) : 1;
    const backendUrls = ranks > 1 ? [] : this.backendUrls;
    if (ranks > 1) args.push('--config', this.dataParallelConfigFile(ranks));
    // One at a time: several tsx processes compiling at once on two cores only slow each other down.
    const count = this.redisUrl ? routers : 1;
    for (let index = 0; index < count; index++) this.routers.push(await startLocalRouter(backendUrls, args));
    return this.routers.map((router) => router.url);
  }

  /** A router config file naming every sim with its `ranks` data-parallel ranks (written once, in the OS temp dir). */
  private dataParallelConfigFile(ranks: number): string {
    const file = join(tmpdir(), `kvroute-bench-dp-${process.pid}.json`);
    const backends = this.backendUrls.map((url) => ({ url, dataParallel: { size: ranks } }));
    writeFileSync(file, JSON.stringify({ backends }));
    return file;
  }

  metricsUrlOf(routerUrl: string): string {
    return this.routers.find((router) => router.url === routerUrl)?.opsUrl ?? routerUrl;
  }

  async endRun(): Promise<void> {
    const routers = this.routers;
    this.routers = [];
    await Promise.all(routers.map((router) => stopLocalProcess(router)));
  }

  async close(): Promise<void> {
    await this.endRun();
    await this.bound?.close();
    if (this.poller) await stopLocalProcess({ process: this.poller });
    this.redis?.disconnect();
    await stopLocalSims(this.sims);
    await this.redisServer?.stop();
  }
}

/** A health poller over `sims`, publishing through `redisUrl` (`extraArgs`: more of its flags); ready when it answers. */
export async function startPoller(
  redisUrl: string,
  sims: readonly LocalSim[],
  extraArgs: readonly string[] = [],
): Promise<ChildProcess> {
  const backendArgs = await pollerBackendArgs(sims);
  const poller = await startOwnListener([await freePort()], ([port]) => {
    const args = [
      ...nodeArgsFor('health-poller'),
      '--host',
      '127.0.0.1',
      '--port',
      String(port),
      '--redis-url',
      redisUrl,
      ...backendArgs,
      '--log-level',
      'warn',
      ...extraArgs,
    ];
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'inherit', 'inherit'] });
    return { probeUrl: `http://127.0.0.1:${port}/healthz`, started: { process: child } };
  });
  return poller.process;
}

/**
 * The poller's backends: their URLs, or, when the sims publish KV events, a config file naming each one's
 * event endpoints and the pool its blocks go in (the sims' served model, asked of the first).
 */
async function pollerBackendArgs(sims: readonly LocalSim[]): Promise<string[]> {
  if (!sims.some((sim) => sim.kvEvents !== undefined)) return ['--backends', sims.map((sim) => sim.url).join(',')];
  const models = (await (await fetch(`${sims[0]?.url}/v1/models`)).json()) as { data: { id: string }[] };
  const model = models.data[0]?.id;
  const backends = sims.map((sim) => ({
    url: sim.url,
    ...(sim.kvEvents === undefined
      ? {}
      : {
          kvEvents: {
            endpoint: `tcp://127.0.0.1:${sim.kvEvents.port}`,
            replayEndpoint: `tcp://127.0.0.1:${sim.kvEvents.replayPort}`,
            model,
          },
        }),
  }));
  const file = join(tmpdir(), `kvroute-bench-poller-${process.pid}.json`);
  writeFileSync(file, JSON.stringify({ backends }));
  return ['--config', file];
}
