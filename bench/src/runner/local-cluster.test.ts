import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ScenarioResults } from '../report';
import { LocalCluster } from './local-cluster';
import { ProgressBar } from './progress';
import { createClientAgent } from './request-client';
import { runScenario, type RecordedSeedRun } from './run-scenario';
import { parseScenario } from './scenario';
import { writeReports } from './write-reports';

/**
 * The whole runner on real processes: 2 vllm-sim backends (near-zero engine time), a private Redis,
 * the health poller and 2 router replicas per run; roundrobin, cacheaware, then the oracle and oracle-cost
 * (one oracle router process each, bench/src/oracle) over the same sessions, after the workload's
 * compulsory-miss bound (one more sim, an infinite cache).
 * Uses KVROUTE_REDIS_URL when set, else spawns redis-server (installed where the tests run).
 */
const scenario = parseScenario(
  `name: runner-e2e
cluster: { backends: 2, profile: fast, routers: 2, redis: true, poller: true }
workload: { kind: sessions, sessions: 3, turns: 3, systemPromptBytes: 2048, maxTokens: 8, thinkMs: 5 }
policies: [roundrobin, cacheaware, oracle, oracle-cost]
seeds: [7]
`,
  'runner-e2e',
);

let cluster: LocalCluster;
let results: ScenarioResults;
let outDir: string;
const logs: string[] = [];
const progress: string[] = [];

beforeAll(async () => {
  cluster = await LocalCluster.start(scenario, {
    redisUrl: process.env['KVROUTE_REDIS_URL'],
    log: (line) => void logs.push(line),
  });
  const agent = createClientAgent();
  try {
    results = await runScenario(scenario, {
      target: cluster,
      agent,
      progress: new ProgressBar({ isTTY: false, write: (text) => void progress.push(text) }),
      workloadInputs: { timeScale: 1, dataDir: '', readText: () => Promise.reject(new Error('no traces here')) },
      log: (line) => void logs.push(line),
    });
  } finally {
    await agent.close();
  }
  outDir = await mkdtemp(join(tmpdir(), 'kvroute-runner-'));
}, 120_000);

afterAll(async () => {
  await cluster?.close();
  if (outDir) await rm(outDir, { recursive: true, force: true });
}, 30_000);

describe('runScenario on a local cluster', () => {
  it('runs every policy over the same workload, kvroute through both replicas and the oracle through its one router, on backends it started', () => {
    expect(cluster.redisUrl).toBeDefined();
    expect(cluster.routerCount).toBe(2);
    const point = results.points[0]!;
    expect(point.policies.map((entry) => entry.policy)).toEqual(['roundrobin', 'cacheaware', 'oracle', 'oracle-cost']);
    const backendIds = cluster.backendUrls.map((url) => new URL(url).host);
    for (const { policy, runs } of point.policies) {
      const run = runs[0] as RecordedSeedRun;
      expect(run.requests).toHaveLength(9);
      expect(run.skipped).toBe(0);
      expect(new Set(run.requests.map((request) => request.router))).toEqual(
        new Set(policy.startsWith('oracle') ? [0] : [0, 1]),
      );
      for (const request of run.requests) {
        expect(request.status).toBe(200);
        expect(request.ttftMs).toBeGreaterThan(0);
        expect(backendIds).toContain(request.backend);
      }
      expect(run.requests.map((request) => request.id).sort()).toEqual([
        's0-t0',
        's0-t1',
        's0-t2',
        's1-t0',
        's1-t1',
        's1-t2',
        's2-t0',
        's2-t1',
        's2-t2',
      ]);
    }
    expect(progress.at(-1)).toContain('9/9 100 %');
  });

  it('starts each run cold and reads the backends’ own counters: they agree with the responses', () => {
    for (const { runs } of results.points[0]!.policies) {
      const run = runs[0] as RecordedSeedRun;
      const cached = run.requests.reduce((sum, request) => sum + (request.cachedTokens ?? 0), 0);
      const prompt = run.requests.reduce((sum, request) => sum + request.promptTokens, 0);
      const hits = run.backends!.reduce((sum, backend) => sum + backend.prefixCacheHitsDelta, 0);
      const queries = run.backends!.reduce((sum, backend) => sum + backend.prefixCacheQueriesDelta, 0);
      expect(run.backends).toHaveLength(2);
      expect(queries).toBe(prompt);
      expect(hits).toBe(cached);
      // Cold start: the first turn of the first session cannot hit.
      expect(run.requests.find((request) => request.id === 's0-t0')?.cachedTokens ?? 0).toBeLessThan(
        run.requests.find((request) => request.id === 's0-t0')!.promptTokens,
      );
    }
  });

  it('the oracle follows the true cache: every follow-up turn is a cache hit on the backend of its conversation', () => {
    const oracle = results.points[0]!.policies.find((entry) => entry.policy === 'oracle')!.runs[0] as RecordedSeedRun;
    const followUps = oracle.requests.filter((request) => !request.id.endsWith('-t0'));
    for (const request of followUps) expect(request.reason).toBe('cache-hit');
    const bySession = new Map<string, Set<string>>();
    for (const request of oracle.requests) {
      const session = request.id.split('-')[0]!;
      bySession.set(session, (bySession.get(session) ?? new Set()).add(request.backend!));
    }
    for (const backends of bySession.values()) expect(backends.size).toBe(1);
  });

  it("oracle-cost routes by cacheaware's rule: its reasons, not the oracle's", () => {
    const run = results.points[0]!.policies.find((entry) => entry.policy === 'oracle-cost')!.runs[0] as RecordedSeedRun;
    const reasons = new Set(run.requests.map((request) => request.reason));
    expect(reasons.has('cache-hit')).toBe(false);
    for (const reason of reasons)
      expect(['prefix-affinity', 'least-loaded', 'spilled-from-saturated', 'load-guard', 'cold-hash']).toContain(
        reason,
      );
  });

  it('computes the compulsory-miss bound once for the workload, on a cache that did not evict, and no run beats it', () => {
    const point = results.points[0]!;
    expect(point.bound).toHaveLength(1);
    const bound = point.bound![0]!;
    expect(bound).toMatchObject({ seed: 7, requests: 9, failed: 0, evictedBlocks: 0 });
    for (const { runs } of point.policies) {
      const run = runs[0] as RecordedSeedRun;
      // The same requests, replies included: the same prompt tokens.
      expect(run.requests.reduce((sum, request) => sum + request.promptTokens, 0)).toBe(bound.promptTokens);
      expect(run.requests.reduce((sum, request) => sum + (request.cachedTokens ?? 0), 0)).toBeLessThanOrEqual(
        bound.cachedTokens,
      );
    }
    expect(progress.some((line) => line.includes('bound') && line.includes('9/9'))).toBe(true);
  });

  it("reads the kvroute routers' prediction counters over both replicas; the oracles have none", () => {
    for (const { policy, runs } of results.points[0]!.policies) {
      const run = runs[0] as RecordedSeedRun;
      if (policy.startsWith('oracle')) {
        expect(run.prediction).toBeUndefined();
        continue;
      }
      const predictions = Object.values(run.prediction!.predictions).reduce((sum, count) => sum + count, 0);
      expect(predictions).toBe(9);
      const observed = run.requests.reduce((sum, request) => sum + (request.cachedTokens ?? 0), 0);
      expect(run.prediction!.observedTokens).toBe(observed);
      expect(run.prediction!.confirmedTokens).toBeLessThanOrEqual(Math.min(run.prediction!.predictedTokens, observed));
    }
  });

  it('writes results.json, report.md and an HTML report with the charts', async () => {
    const written = await writeReports(outDir, scenario, results, { mode: 'test' });
    const json = JSON.parse(await readFile(written.json, 'utf8'));
    expect(json).toMatchObject({
      mode: 'test',
      scenario: { name: 'runner-e2e' },
      results: { scenario: 'runner-e2e', sweepVariable: 'sessions' },
    });
    const markdown = await readFile(written.markdown, 'utf8');
    expect(markdown).toContain('| oracle |');
    expect(markdown).toContain('| oracle-cost |');
    expect(markdown).toMatch(/\| bound \| \d+\.\d \|/);
    expect(json.results.points[0].bound[0].seed).toBe(7);
    const html = await readFile(written.html, 'utf8');
    expect(html.match(/<svg/g)?.length).toBe(4);
  });
});
