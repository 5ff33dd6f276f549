/**
 * Runs a scenario: for every sweep value, seed and policy, one run on a cold cluster (the target's
 * `startRun`), the workload driven through the routers, backend counters read before and after.
 * The target is either the local cluster of child processes or a real deployment (`remote-target.ts`).
 */
import type { Agent } from 'undici';
import type { PolicyRuns, ScenarioResults, SeedRun, SweepPoint } from '../report';
import { prefixCounterDeltas, readPrefixCounters } from './backend-truth';
import { driveWorkload, requestCount } from './drive-workload';
import type { ProgressBar } from './progress';
import type { RunRequestRecord } from './request-client';
import { ROUTERS_SWEEP, sweepValues, sweepVariable, workloadFor, type Scenario, type WorkloadInputs } from './scenario';

/** Where runs happen. */
export interface RunTarget {
  readonly backendUrls: readonly string[];
  /** Policies this target can run (e.g. a real deployment cannot run `oracle`); others are skipped with a warning. */
  supports(policy: string): boolean;
  /** Cold caches, routers with `policy` (`routers` replicas when given, else the scenario's); the routers' base URLs. */
  startRun(policy: string, routers?: number): Promise<string[]>;
  endRun(): Promise<void>;
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
  let runIndex = 0;
  for (const value of values) {
    const byPolicy = new Map<string, SeedRun[]>(policies.map((policy) => [policy, []]));
    for (const seed of seeds) {
      // One workload per (value, seed), the same for every policy.
      const workload = await workloadFor(scenario, { ...options.workloadInputs, seed, sweepValue: value });
      const total = requestCount(workload);
      for (const policy of policies) {
        runIndex++;
        const routers = await options.target.startRun(policy, variable === ROUTERS_SWEEP ? value : undefined);
        try {
          const model = await servedModel(routers[0] as string);
          const before = await readPrefixCounters(options.agent, options.target.backendUrls);
          options.progress.begin(`run ${runIndex}/${totalRuns}  ${variable}=${value} seed ${seed} ${policy}`, total);
          const driven = await driveWorkload(workload, {
            routers,
            model,
            agent: options.agent,
            maxRunMs: scenario.maxRunSeconds * 1000,
            maxInflight: scenario.maxInflight,
            extraBody: options.extraBody,
            onDone: () => options.progress.tick(),
          });
          options.progress.end();
          const after = await readPrefixCounters(options.agent, options.target.backendUrls);
          if (driven.skipped > 0) options.log(`  ${driven.skipped} requests not sent: the run hit maxRunSeconds (${scenario.maxRunSeconds} s)`);
          const run: RecordedSeedRun = { seed, policy, sweepValue: value, wallMs: driven.wallMs, requests: driven.requests, backends: prefixCounterDeltas(before, after), skipped: driven.skipped };
          byPolicy.get(policy)?.push(run);
        } finally {
          await options.target.endRun();
        }
      }
    }
    points.push({ value, policies: policies.map((policy): PolicyRuns => ({ policy, runs: byPolicy.get(policy) ?? [] })) });
  }
  return { scenario: scenario.name, sweepVariable: variable, points };
}

/** The first model the router serves (`GET /v1/models`). */
export async function servedModel(routerUrl: string): Promise<string> {
  const response = await fetch(new URL('/v1/models', routerUrl));
  if (!response.ok) throw new Error(`${routerUrl}/v1/models answered ${response.status}`);
  const body = (await response.json()) as { data?: Array<{ id?: string }> };
  const id = body.data?.[0]?.id;
  if (!id) throw new Error(`${routerUrl}/v1/models lists no model`);
  return id;
}
