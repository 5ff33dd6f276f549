/**
 * Runs a scenario: for every sweep value and seed, the workload's compulsory-miss bound where the
 * target can compute it (compulsory-bound.ts: once, whatever the policy), then for every policy one run
 * on a cold cluster (the target's `startRun`), the workload driven through the routers, the backends'
 * prefix-cache counters and the routers' prediction counters (router-predictions.ts) read before and after.
 * The target is either the local cluster of child processes or a real deployment (`remote-target.ts`).
 */
import { randomBytes } from 'node:crypto';
import type { Agent } from 'undici';
import type { PolicyRuns, ScenarioResults, SeedBound, SeedRun, SweepPoint } from '../report';
import { prefixCounterDeltas, readPrefixCounters } from './backend-truth';
import type { BoundReplayHooks } from './compulsory-bound';
import { runPredictionTotals, scrapePredictionCounters } from './router-predictions';
import { driveWorkload, requestCount } from './drive-workload';
import type { ProgressBar } from './progress';
import { servedModel, type RunRequestRecord } from './request-client';
import {
  ROUTERS_SWEEP,
  sweepValues,
  sweepVariable,
  workloadFor,
  type Scenario,
  type Workload,
  type WorkloadInputs,
} from './scenario';

/** Where runs happen. */
export interface RunTarget {
  readonly backendUrls: readonly string[];
  /** Policies this target can run (e.g. a real deployment cannot run `oracle`); others are skipped with a warning. */
  supports(policy: string): boolean;
  /** Cold caches, routers with `policy` (`routers` replicas when given, else the scenario's); the routers' base URLs. */
  startRun(policy: string, routers?: number): Promise<string[]>;
  /** Where a router of the run serves /metrics (a kvroute router: its ops listener, not the URL requests go to). */
  metricsUrlOf(routerUrl: string): string;
  endRun(): Promise<void>;
  /** The compulsory-miss bound of a workload and seed, where the target can replay it (the local cluster); absent elsewhere. */
  compulsoryBound?(
    workload: Workload,
    seed: number,
    hooks: BoundReplayHooks & { readonly agent: Agent },
  ): Promise<SeedBound>;
}

export interface RunScenarioOptions {
  readonly target: RunTarget;
  readonly agent: Agent;
  readonly progress: ProgressBar;
  readonly workloadInputs: Omit<WorkloadInputs, 'seed' | 'sweepValue'>;
  readonly log: (line: string) => void;
  /** Overrides of the scenario's lists (CLI flags). */
  readonly policies?: readonly string[];
  readonly seeds?: readonly number[];
  readonly sweepValues?: readonly number[];
  /** Extra request body fields (e.g. `ignore_eos`). */
  readonly extraBody?: Readonly<Record<string, unknown>>;
  /**
   * Every run's requests carry their own `cache_salt` (`--salt-runs`): a run cannot hit what an earlier
   * run cached, on the engines or in the routers' index, with no cache reset (vLLM's needs dev mode).
   */
  readonly saltRuns?: boolean;
}

/** A run's own cache salt: unguessable, so no earlier run (or other client) shares its partition. */
export function runCacheSalt(runIndex: number): string {
  return `bench-run-${runIndex}-${randomBytes(12).toString('base64url')}`;
}

/** A run's raw record: the report's SeedRun plus what is needed to check it later. */
export interface RecordedSeedRun extends SeedRun {
  readonly requests: readonly RunRequestRecord[];
  readonly policy: string;
  readonly sweepValue: number;
  readonly skipped: number;
}

export async function runScenario(scenario: Scenario, options: RunScenarioOptions): Promise<ScenarioResults> {
  const policies = (options.policies ?? scenario.policies).filter((policy) => {
    if (options.target.supports(policy)) return true;
    options.log(`policy ${policy} cannot run on this target: skipped`);
    return false;
  });
  const seeds = options.seeds ?? scenario.seeds;
  const values = options.sweepValues ?? sweepValues(scenario);
  const variable = sweepVariable(scenario);
  const totalRuns = values.length * seeds.length * policies.length;
  const points: SweepPoint[] = [];
  // A routers sweep drives the same workload at every value: its bound is computed once per seed.
  const boundsBySeed = new Map<number, SeedBound>();
  let runIndex = 0;
  for (const value of values) {
    const byPolicy = new Map<string, SeedRun[]>(policies.map((policy) => [policy, []]));
    const bounds: SeedBound[] = [];
    for (const seed of seeds) {
      // One workload per (value, seed), the same for every policy.
      const workload = await workloadFor(scenario, { ...options.workloadInputs, seed, sweepValue: value });
      const total = requestCount(workload);
      const cached = variable === ROUTERS_SWEEP ? boundsBySeed.get(seed) : undefined;
      const bound =
        cached ?? (await compulsoryBound(options, workload, seed, `${variable}=${value} seed ${seed}`, total));
      if (bound) {
        bounds.push(bound);
        if (variable === ROUTERS_SWEEP) boundsBySeed.set(seed, bound);
      }
      for (const policy of policies) {
        runIndex++;
        const routers = await options.target.startRun(policy, variable === ROUTERS_SWEEP ? value : undefined);
        try {
          const model = await servedModel(routers[0] as string);
          const before = await readPrefixCounters(options.agent, options.target.backendUrls);
          const metricsUrls = routers.map((url) => options.target.metricsUrlOf(url));
          const predictionsBefore = await scrapePredictionCounters(options.agent, metricsUrls);
          options.progress.begin(`run ${runIndex}/${totalRuns}  ${variable}=${value} seed ${seed} ${policy}`, total);
          const driven = await driveWorkload(workload, {
            routers,
            model,
            agent: options.agent,
            maxRunMs: scenario.maxRunSeconds * 1000,
            maxInflight: scenario.maxInflight,
            extraBody: options.saltRuns
              ? { ...options.extraBody, cache_salt: runCacheSalt(runIndex) }
              : options.extraBody,
            onDone: () => options.progress.tick(),
          });
          options.progress.end();
          const after = await readPrefixCounters(options.agent, options.target.backendUrls);
          const succeeded = driven.requests.filter((request) => request.status >= 200 && request.status < 300).length;
          const prediction = await runPredictionTotals(options.agent, metricsUrls, predictionsBefore, {
            expectedPredictions: succeeded,
          });
          if (prediction?.learnedBytesPerToken !== undefined)
            options.log(`  ${bytesPerTokenLine(prediction.learnedBytesPerToken, driven.requests)}`);
          if (driven.skipped > 0)
            options.log(
              `  ${driven.skipped} requests not sent: the run hit maxRunSeconds (${scenario.maxRunSeconds} s)`,
            );
          const run: RecordedSeedRun = {
            seed,
            policy,
            sweepValue: value,
            wallMs: driven.wallMs,
            requests: driven.requests,
            backends: prefixCounterDeltas(before, after),
            ...(prediction ? { prediction } : {}),
            skipped: driven.skipped,
          };
          byPolicy.get(policy)?.push(run);
        } finally {
          await options.target.endRun();
        }
      }
    }
    points.push({
      value,
      policies: policies.map((policy): PolicyRuns => ({ policy, runs: byPolicy.get(policy) ?? [] })),
      ...(bounds.length > 0 ? { bound: bounds } : {}),
    });
  }
  return { scenario: scenario.name, sweepVariable: variable, points };
}

/** The target's compulsory-miss bound of one workload and seed, with progress; undefined where it has none or it failed (said in the log). */
async function compulsoryBound(
  options: RunScenarioOptions,
  workload: Workload,
  seed: number,
  label: string,
  total: number,
): Promise<SeedBound | undefined> {
  const target = options.target;
  if (!target.compulsoryBound) return undefined;
  options.progress.begin(`bound  ${label} (replay on an infinite cache)`, total);
  try {
    const bound = await target.compulsoryBound(workload, seed, {
      agent: options.agent,
      extraBody: options.extraBody,
      onDone: () => options.progress.tick(),
    });
    if (bound.failed > 0)
      options.log(`  bound, ${label}: ${bound.failed} of ${bound.requests} replayed requests failed (left out)`);
    return bound;
  } catch (error) {
    options.log(`  bound, ${label}: not computed (${(error as Error).message})`);
    return undefined;
  } finally {
    options.progress.end();
  }
}

/**
 * The routers' learned bytes per token against the prompts' own: Σ prompt text bytes ÷ Σ prompt tokens
 * the engines counted, over the run's answered requests (what the cost model's bytesPerToken stands for).
 */
export function bytesPerTokenLine(
  learned: number,
  requests: readonly { readonly promptTokens: number; readonly promptTextBytes?: number }[],
): string {
  let bytes = 0;
  let tokens = 0;
  for (const request of requests) {
    if (request.promptTokens <= 0 || request.promptTextBytes === undefined) continue;
    bytes += request.promptTextBytes;
    tokens += request.promptTokens;
  }
  if (tokens === 0) return `bytes per token: learned ${learned.toFixed(3)} (no prompt tokens reported)`;
  const actual = bytes / tokens;
  const off = ((learned - actual) / actual) * 100;
  return `bytes per token: learned ${learned.toFixed(3)}, the prompts' ${actual.toFixed(3)} (${off >= 0 ? '+' : ''}${off.toFixed(1)} %)`;
}
