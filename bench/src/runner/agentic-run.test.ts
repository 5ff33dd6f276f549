import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { agentRequests, type AgentRequest, type AgentSession } from '../workloads';
import { driveWorkload, requestCount, type DriveResult } from './drive-workload';
import { LocalCluster } from './local-cluster';
import { createClientAgent, type RunRequestRecord } from './request-client';
import { servedModel } from './request-client';
import { parseScenario, workloadFor } from './scenario';

/**
 * An agentic workload through a real kvroute router (cacheaware, in-memory state) to 2 real vllm-sim
 * backends on loopback (near-zero engine time, reasoning for 4 tokens when asked): the sims parse our
 * tools, tool choices, calls and tool results, stream calls we must read back, and their prefix caches
 * tell whether every request really carried the previous one's history byte for byte.
 */
const scenario = parseScenario(
  `name: agentic-run
cluster: { backends: 2, profile: fast, sim: { reasoningTokens: 4 }, redis: false, poller: false }
workload:
  { kind: agentic, sessions: 3, turns: 3, systemPromptBytes: 2048, taskBytes: 1024, userTurnBytes: 40, toolRounds: [1, 3],
    toolResultBytes: [100, 600], toolCallTokens: 6, answerTokens: 8, reasoningProbability: 0.5, reasoningTokens: 4,
    startJitterMs: 10, thinkMs: 5, toolMs: 5 }
policies: [cacheaware]
`,
  'agentic-run',
);

let cluster: LocalCluster;
let sessions: readonly AgentSession[];
let result: DriveResult;
let total: number;
const plans = new Map<string, AgentRequest>();

beforeAll(async () => {
  const workload = await workloadFor(scenario, {
    seed: 4,
    sweepValue: 3,
    timeScale: 1,
    dataDir: '',
    readText: () => Promise.reject(new Error('no traces')),
  });
  if (workload.kind !== 'agentic') throw new Error(`expected an agentic workload, got ${workload.kind}`);
  sessions = workload.sessions;
  total = requestCount(workload);
  for (const session of sessions) for (const request of agentRequests(session)) plans.set(request.id, request);
  cluster = await LocalCluster.start(scenario, { log: () => undefined });
  const agent = createClientAgent();
  try {
    const routers = await cluster.startRun('cacheaware');
    result = await driveWorkload(workload, {
      routers,
      model: await servedModel(routers[0] as string),
      agent,
      maxRunMs: 60_000,
      maxInflight: 16,
    });
  } finally {
    await agent.close();
  }
}, 90_000);

afterAll(async () => {
  await cluster?.close();
}, 30_000);

const inOrder = (session: AgentSession): RunRequestRecord[] =>
  result.requests.filter((record) => record.id.startsWith(`${session.id}-`)).sort((a, b) => a.sentAtMs - b.sentAtMs);

describe('an agentic workload through a router to vllm-sim', () => {
  it('gets a streamed call in every tool round and an answer at the end of every turn, each with TTFT', () => {
    expect(result.requests).toHaveLength(total);
    expect(result.skipped).toBe(0);
    for (const record of result.requests) {
      const plan = plans.get(record.id);
      expect(record).toMatchObject({ status: 200, completionTokens: plan?.maxTokens });
      expect(record.error).toBeUndefined();
      expect(record.ttftMs).toBeGreaterThan(0);
      expect(record.finishReason).toBe(plan?.isAnswer ? 'length' : 'tool_calls');
    }
  });

  it('reasons only where the workload asks: the reasoning requests spend their extra tokens and still call', () => {
    const reasoning = result.requests.filter((record) => plans.get(record.id)?.agent.thinking === true);
    expect(reasoning.length).toBeGreaterThan(0);
    for (const record of reasoning)
      expect(record).toMatchObject({ completionTokens: 6 + 4, finishReason: 'tool_calls' });
    const plain = result.requests.filter(
      (record) => plans.get(record.id)?.agent.thinking === false && !plans.get(record.id)?.isAnswer,
    );
    for (const record of plain) expect(record.completionTokens).toBe(6);
  });

  it('sends each request with the whole history: prompts grow, and on the same backend the previous prompt is a cache hit', () => {
    let sameBackend = 0;
    for (const session of sessions) {
      const records = inOrder(session);
      for (let index = 1; index < records.length; index++) {
        const previous = records[index - 1] as RunRequestRecord;
        const current = records[index] as RunRequestRecord;
        expect(current.promptTokens).toBeGreaterThan(previous.promptTokens);
        if (current.backend !== previous.backend) continue;
        sameBackend++;
        // The previous prompt (all but its last, partial 16-token block) is this one's prefix, byte for byte.
        expect(current.cachedTokens ?? 0).toBeGreaterThanOrEqual(Math.floor((previous.promptTokens - 1) / 16) * 16);
      }
    }
    // cacheaware keeps a session's requests where its history is.
    expect(sameBackend).toBeGreaterThanOrEqual((result.requests.length - sessions.length) * 0.7);
  });
});
