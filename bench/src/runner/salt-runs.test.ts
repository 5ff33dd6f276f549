import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ScenarioResults, SeedRun } from '../report';
import {
  startLocalRouter,
  startLocalSims,
  stopLocalProcess,
  stopLocalSims,
  type LocalRouter,
  type LocalSim,
} from '../local-sims';
import { ProgressBar } from './progress';
import { RemoteTarget } from './remote-target';
import { createClientAgent } from './request-client';
import { runCacheSalt, runScenario } from './run-scenario';
import { parseScenario } from './scenario';

/**
 * `--salt-runs` (cold runs on a real deployment without vLLM's dev-mode cache reset): a deployed router
 * and a vllm-sim that keep their caches between runs, two runs of the same workload. Unsalted, the second
 * run hits what the first cached (its first turns included); salted, every run starts cold on the
 * engine and in the router's index.
 */
const scenario = parseScenario(
  `name: salt-runs
cluster: { backends: 1, profile: fast, redis: false, poller: false }
workload: { kind: sessions, sessions: 2, turns: 2, systemPromptBytes: 2048, maxTokens: 4 }
policies: [cacheaware]
seeds: [1]
`,
  'salt-runs',
);

let sims: LocalSim[];
let router: LocalRouter;

beforeAll(async () => {
  sims = await startLocalSims(1, ['--profile', 'fast', '--model', 'salt-model']);
  router = await startLocalRouter(
    sims.map((sim) => sim.url),
    ['--policy', 'cacheaware'],
  );
}, 60_000);

afterAll(async () => {
  if (router) await stopLocalProcess(router);
  if (sims) await stopLocalSims(sims);
}, 30_000);

async function twoRuns(saltRuns: boolean): Promise<SeedRun[]> {
  const agent = createClientAgent();
  try {
    // Two policy labels, one deployed router: the second run meets what the first left in the caches.
    const target = new RemoteTarget({
      routers: new Map([['*', [router.url]]]),
      backendUrls: sims.map((sim) => sim.url),
      resetCache: false,
      log: () => undefined,
    });
    const results: ScenarioResults = await runScenario(scenario, {
      target,
      agent,
      progress: new ProgressBar({ isTTY: false, write: () => undefined }),
      workloadInputs: { timeScale: 1, dataDir: '', readText: () => Promise.reject(new Error('no traces')) },
      log: () => undefined,
      policies: ['cacheaware', 'leastloaded'],
      saltRuns,
    });
    return (results.points[0]?.policies ?? []).map((policy) => policy.runs[0] as SeedRun);
  } finally {
    await agent.close();
  }
}

/**
 * The fewest cached tokens of any request in the run. In a cold run the first request hits nothing (0);
 * later ones hit the system prompt the sessions share. In a warm run every request hits it at least.
 */
const fewestCached = (run: SeedRun): number => Math.min(...run.requests.map((request) => request.cachedTokens ?? 0));

describe('--salt-runs', () => {
  it('gives every run its own unguessable salt', () => {
    const salts = new Set([runCacheSalt(1), runCacheSalt(1), runCacheSalt(2)]);
    expect(salts.size).toBe(3);
    for (const salt of salts) expect(salt).toMatch(/^bench-run-\d+-[A-Za-z0-9_-]{16}$/);
  });

  it('starts a run cold on a deployment whose caches an earlier run warmed; unsalted runs start warm', async () => {
    const [firstWarm, secondWarm] = await twoRuns(false);
    expect(firstWarm && secondWarm).toBeTruthy();
    expect(fewestCached(firstWarm as SeedRun)).toBe(0);
    expect(fewestCached(secondWarm as SeedRun)).toBeGreaterThan(400);

    const [firstSalted, secondSalted] = await twoRuns(true);
    for (const run of [firstSalted, secondSalted] as SeedRun[]) {
      expect(run.requests.every((request) => request.status === 200)).toBe(true);
      expect(fewestCached(run)).toBe(0);
    }
  }, 120_000);
});
