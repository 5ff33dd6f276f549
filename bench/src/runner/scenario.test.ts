import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { agentRequestCount, eventsToJsonl, sessionEvents } from '../workloads';
import {
  parseScenario,
  SCENARIO_DIR,
  ScenarioError,
  sweepValues,
  sweepVariable,
  workloadAt,
  workloadFor,
  type Scenario,
  type Workload,
} from './scenario';

const files = readdirSync(SCENARIO_DIR).filter((name) => name.endsWith('.yaml'));
const load = (name: string): Scenario => parseScenario(readFileSync(join(SCENARIO_DIR, `${name}.yaml`), 'utf8'), name);

/** A workload as JSONL text (sessions with placeholder replies), to compare byte for byte. */
const asJsonl = (workload: Workload): string =>
  eventsToJsonl(workload.kind === 'sessions' ? sessionEvents(workload.sessions) : workload.events);

const MOONCAKE_LINES = [
  { timestamp: 0, input_length: 1100, output_length: 20, hash_ids: [1, 2, 3] },
  { timestamp: 500, input_length: 600, output_length: 300, hash_ids: [1, 2] },
  { timestamp: 900, input_length: 700, output_length: 5, hash_ids: [4, 5] },
];
const inputs = (text: string) => ({
  timeScale: 1,
  dataDir: '/data',
  readText: async (path: string) =>
    path === '/data/trace.file' ? text : Promise.reject(new Error(`unexpected ${path}`)),
});

describe('scenario files', () => {
  it('has the scenarios the issue asks for, and every file parses', () => {
    expect(files.map((name) => name.replace('.yaml', ''))).toEqual(
      expect.arrayContaining([
        'seed-cloud',
        'seed-local',
        'mooncake-synthetic',
        'long-context-mix',
        'multi-replica',
        'demo',
      ]),
    );
    for (const name of files)
      expect(() => parseScenario(readFileSync(join(SCENARIO_DIR, name), 'utf8'), name)).not.toThrow();
  });

  it(
    "seed-cloud is the seed's cloud sweep: 4 × a100-14b, sessions 4 → 24, 8 turns, 6,144-byte system " +
      'prompt, max_tokens 64, the valve at 4 for prefixaware, 3 seeds, the oracle',
    () => {
      const scenario = load('seed-cloud');
      expect(scenario.cluster).toMatchObject({
        backends: 4,
        profile: 'a100-14b',
        routerByPolicy: { prefixaware: { saturationInflight: 4 } },
      });
      expect(scenario.workload).toMatchObject({ kind: 'sessions', turns: 8, systemPromptBytes: 6144, maxTokens: 64 });
      expect(scenario.sweep).toEqual({ variable: 'sessions', values: [4, 8, 12, 16, 20, 24] });
      expect(scenario.seeds).toHaveLength(3);
      expect(scenario.policies).toEqual(
        expect.arrayContaining(['roundrobin', 'leastloaded', 'prefixaware', 'cacheaware', 'oracle']),
      );
    },
  );

  it('agentic runs 16 agent sessions on 4 × a100-14b, the sims reasoning as long as the workload budgets, every policy and the oracle over 3 seeds', () => {
    const scenario = load('agentic');
    expect(scenario.cluster).toMatchObject({ backends: 4, profile: 'a100-14b', sim: { reasoningTokens: 32 } });
    expect(scenario.workload).toMatchObject({
      kind: 'agentic',
      sessions: 16,
      reasoningTokens: 32,
      reasoningProbability: 0.3,
      toolRounds: [1, 4],
    });
    expect(scenario.policies).toEqual(
      expect.arrayContaining(['roundrobin', 'leastloaded', 'prefixaware', 'cacheaware', 'oracle']),
    );
    expect(scenario.seeds).toEqual([1, 2, 3]);
    expect(sweepVariable(scenario)).toBe('sessions');
    expect(sweepValues(scenario)).toEqual([16]);
  });

  it('multi-replica sweeps the router replicas over one workload', () => {
    const scenario = load('multi-replica');
    expect(sweepVariable(scenario)).toBe('routers');
    expect(sweepValues(scenario)).toEqual([1, 3]);
    expect(workloadAt(scenario, 3)).toEqual(scenario.workload);
  });
});

describe('parseScenario', () => {
  it('fills defaults and names each bad key with its path', () => {
    const minimal = parseScenario('name: tiny\nworkload: { kind: sessions }\n', 'tiny.yaml');
    expect(minimal.cluster).toMatchObject({ backends: 4, routers: 1, redis: true, timeScale: 1 });
    expect(minimal.workload).toMatchObject({ sessions: 4, turns: 8 });
    expect(sweepValues(minimal)).toEqual([4]);

    const bad =
      'name: Bad Name\ncluster: { routers: 3, redis: false, bogus: 1 }\nworkload: { kind: poisson, ' +
      'ratePerS: -1 }\nsweep: { variable: sessions, values: [1] }\n';
    let message = '';
    try {
      parseScenario(bad, 'bad.yaml');
    } catch (error) {
      expect(error).toBeInstanceOf(ScenarioError);
      message = (error as Error).message;
    }
    expect(message).toMatch(/^bad\.yaml: invalid scenario/);
    expect(message).toContain('name: lower-case words joined by hyphens');
    expect(message).toContain('cluster: Unrecognized key: "bogus"');
    expect(message).toContain('workload.ratePerS');
  });

  it('refuses agentic reasoning the sims do not do as long, and a range whose min is above its max', () => {
    const agentic = (cluster: string, workload: string) =>
      `name: a\ncluster: ${cluster}\nworkload: { kind: agentic${workload} }\n`;
    expect(() => parseScenario(agentic('{}', ''), 'a')).toThrow(
      /cluster\.sim\.reasoningTokens: reasoning turns need the sims to reason for workload\.reasoningTokens \(32\)/,
    );
    expect(() => parseScenario(agentic('{ sim: { reasoningTokens: 8 } }', ', reasoningTokens: 16'), 'a')).toThrow(
      /cluster\.sim\.reasoningTokens/,
    );
    expect(
      parseScenario(agentic('{ sim: { reasoningTokens: 16 } }', ', reasoningTokens: 16'), 'a').workload,
    ).toMatchObject({ kind: 'agentic', sessions: 16, turns: 6, toolRounds: [1, 4] });
    // No reasoning turns: every request says enable_thinking false, whatever the sims do.
    expect(() => parseScenario(agentic('{}', ', reasoningProbability: 0'), 'a')).not.toThrow();
    expect(() => parseScenario(agentic('{}', ', reasoningProbability: 0, toolRounds: [3, 1]'), 'a')).toThrow(
      /workload\.toolRounds: a range is \[min, max\] with min ≤ max/,
    );
  });

  it('refuses several routers without Redis, and a sweep over a key the workload does not have', () => {
    expect(() =>
      parseScenario('name: a\ncluster: { routers: 2, redis: false }\nworkload: { kind: sessions }\n', 'a'),
    ).toThrow(/cluster\.routers: more than one router needs redis/);
    expect(() =>
      parseScenario('name: a\nworkload: { kind: sessions }\nsweep: { variable: ratePerS, values: [1] }\n', 'a'),
    ).toThrow(/sweep\.variable: the sessions workload has no key "ratePerS"/);
    expect(() => parseScenario('name: a\nworkload: [\n', 'a')).toThrow(/a: not valid YAML/);
  });
});

describe('workloadFor', () => {
  it('same scenario, seed and sweep value: a byte-identical trace; another seed or value: another', async () => {
    const scenario = load('seed-cloud');
    const at = (seed: number, sweepValue: number) =>
      workloadFor(scenario, { ...inputs(''), seed, sweepValue }).then(asJsonl);
    const first = await at(1, 8);
    expect(await at(1, 8)).toBe(first);
    expect(await at(2, 8)).not.toBe(first);
    const four = await at(1, 4);
    expect(four.trim().split('\n')).toHaveLength(4 * 8);
    expect(first.trim().split('\n')).toHaveLength(8 * 8);
  });

  it('replays a Mooncake trace compressed by the time-scale, with the output cap, and an Azure CSV', async () => {
    const mooncake = parseScenario(
      'name: m\nworkload: { kind: trace, format: mooncake, file: trace.file, maxOutputTokens: 100, limit: 2 }\n',
      'm',
    );
    const text = MOONCAKE_LINES.map((line) => JSON.stringify(line)).join('\n');
    const workload = await workloadFor(mooncake, { ...inputs(text), timeScale: 2, seed: 1, sweepValue: 0 });
    expect(workload.kind).toBe('events');
    const events = workload.kind === 'events' ? workload.events : [];
    expect(events.map((event) => [event.atMs, event.maxTokens])).toEqual([
      [0, 20],
      [250, 100],
    ]);
    // Equal hash ids [1, 2] are equal text: the second prompt is the first one's first two blocks.
    const [a, b] = events.map((event) => (event.kind === 'completion' ? event.prompt : ''));
    expect(a!.startsWith(b!.slice(0, 2048 * 2 - 1))).toBe(true);

    const azure = parseScenario('name: z\nworkload: { kind: trace, format: azure, file: trace.file }\n', 'z');
    const csv =
      'TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n2023-11-16 18:15:47.6805900,396,109\n';
    const replay = await workloadFor(azure, { ...inputs(csv), seed: 1, sweepValue: 0 });
    expect(
      replay.kind === 'events' ? replay.events.map((event) => [Math.round(event.atMs), event.maxTokens]) : [],
    ).toEqual([
      [0, 44],
      [1000, 109],
    ]);
  });

  it('builds agent sessions from the seed, with their requests as a trace; the sweep sets the session count', async () => {
    const scenario = parseScenario(
      'name: g\ncluster: { sim: { reasoningTokens: 4 } }\nworkload: { kind: agentic, turns: 2, taskBytes: ' +
        '100, systemPromptBytes: 100, toolResultBytes: 40, reasoningTokens: 4 }\nsweep: { variable: ' +
        'sessions, values: [2, 3] }\n',
      'g',
    );
    const at = (seed: number, sweepValue: number) => workloadFor(scenario, { ...inputs(''), seed, sweepValue });
    const first = await at(1, 2);
    if (first.kind !== 'agentic') throw new Error(`expected agentic, got ${first.kind}`);
    expect(first.sessions).toHaveLength(2);
    expect(first.events).toHaveLength(first.sessions.reduce((sum, session) => sum + agentRequestCount(session), 0));
    expect(first.events.every((event) => event.kind === 'chat' && event.agent !== undefined)).toBe(true);
    expect(asJsonl(await at(1, 2))).toBe(asJsonl(first));
    expect(asJsonl(await at(2, 2))).not.toBe(asJsonl(first));
    const three = await at(1, 3);
    expect(three.kind === 'agentic' ? three.sessions.slice(0, 2) : []).toEqual(first.sessions);
  });

  it('applies a numeric sweep variable to the workload', async () => {
    const scenario = parseScenario(
      'name: p\nworkload: { kind: poisson, ratePerS: 5, count: 20, poolSize: 2, reuseRatio: 0.5, ' +
        'prefixTokens: { kind: fixed, value: 50 }, promptTokens: { kind: fixed, value: 80 }, outputTokens: ' +
        '{ kind: fixed, value: 8 } }\nsweep: { variable: count, values: [5, 9] }\n',
      'p',
    );
    const sized = await Promise.all(
      [5, 9].map((sweepValue) => workloadFor(scenario, { ...inputs(''), seed: 3, sweepValue })),
    );
    expect(sized.map((workload) => (workload.kind === 'events' ? workload.events.length : 0))).toEqual([5, 9]);
  });
});
