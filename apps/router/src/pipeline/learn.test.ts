import { InMemoryRoutingState, type LearnInput, type RoutingDecision } from '@kvroute/routing';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import type { Backend } from '../backends/backend-registry';
import { ResponseTail } from '../proxy/response-tail';
import { RouterMetrics } from '../router-metrics';
import { Lease } from '../routing/lease';
import { createLearner, type LearnDeps } from './learn';
import type { Ticket } from './route';

/** A response's last bytes, as the relay keeps them. */
function tail(text: string): ResponseTail {
  const kept = new ResponseTail(4096);
  kept.add(Buffer.from(text));
  return kept;
}

const usage = (prompt: number, cached: number) =>
  `{"usage":{"prompt_tokens":${prompt},"prompt_tokens_details":{"cached_tokens":${cached}}}}`;

function setup(overrides: Partial<LearnDeps> = {}) {
  const state = new InMemoryRoutingState({ maxBlocksPerBackend: 1000, blockIdleTtlMs: 0, nowMs: () => 0 });
  const calls: LearnInput[] = [];
  const spied = Object.assign(Object.create(state) as InMemoryRoutingState, {
    learn: (pool: string, input: LearnInput) => (calls.push(input), state.learn(pool, input)),
  });
  let clock = 0;
  const learner = createLearner({
    metrics: new RouterMetrics(),
    state: spied,
    logger: pino({ level: 'silent' }),
    clockMs: () => clock,
    correctOwnership: true,
    calibrate: true,
    calibrationFlushMs: 1000,
    prefillMsPerToken: () => 0.07,
    onLearned: () => undefined,
    lastRestartMs: () => null,
    ...overrides,
  });
  const ticket = (
    matchBlocks: number,
    atMs = 50_000,
    matchRecordedAtMs: number | null = matchBlocks > 0 ? atMs - 5_000 : null,
  ): Ticket => ({
    backend: { id: 'a' } as Backend,
    decision: { kind: 'routed', backendId: 'a', reason: 'prefix-affinity', scores: [] } as unknown as Extract<
      RoutingDecision,
      { kind: 'routed' }
    >,
    policyName: 'cacheaware',
    lease: new Lease({
      state,
      pool: 'm',
      backendId: 'a',
      leaseId: 'l',
      onError: () => undefined,
      blocksAtFirstOutput: [],
    }),
    // 4 bytes a token, 64 tokens a routing block.
    prediction: { matchBlocks, blockSizeBytes: 256, textBytes: 10_240 },
    routed: {
      pool: 'm',
      atMs,
      blockHashes: Array.from({ length: 40 }, (_, i) => i + 1),
      matchRecordedAtMs,
      inflightAhead: 0,
      pendingAheadTokens: 0,
    },
  });
  return { learner, calls, ticket, advance: (ms: number) => (clock += ms) };
}

describe('the learn stage', () => {
  it('sends a correction for an overprediction, none for a confirmed one, and a calibration batch once per flush interval', () => {
    const { learner, calls, ticket, advance } = setup();
    learner.responseEnded(ticket(20), tail(usage(2_560, 1_280))); // confirmed, batch not due
    expect(calls).toHaveLength(0);
    learner.responseEnded(ticket(30), tail(usage(2_560, 0))); // overpredicted
    expect(calls).toHaveLength(1);
    expect(calls[0]?.correction).toMatchObject({ backendId: 'a', outcome: 'overpredicted', matchRecordedAtMs: 45_000 });
    expect(calls[0]?.calibration).toBeNull();
    advance(1_000);
    learner.responseEnded(ticket(20), tail(usage(2_560, 1_280)));
    expect(calls).toHaveLength(2);
    expect(calls[1]?.correction).toBeNull();
    // The three responses' bytes per token, batched.
    expect(calls[1]?.calibration?.bytesPerToken).toEqual({ samples: 3, sum: 12 });
  });

  it("sends the evidence time the decision read (its deepest matched block's entry), not one read after the request's own recording", async () => {
    const { learner, calls, ticket } = setup();
    learner.responseEnded(ticket(30, 50_000, 41_000), tail(usage(2_560, 0)));
    expect(calls[0]?.correction).toMatchObject({
      outcome: 'overpredicted',
      routedAtMs: 50_000,
      matchRecordedAtMs: 41_000,
    });
    // The store answers from it alone: its index holds nothing of that chain (here: never recorded).
    await new Promise((resolve) => setImmediate(resolve));
    expect(learner.retentionMs('a')).toBe(9_000);
  });

  it('stops sending underpredictions once the state said the backend has no retention', async () => {
    const { learner, calls, ticket } = setup();
    learner.responseEnded(ticket(0), tail(usage(2_560, 2_048)));
    expect(calls).toHaveLength(1);
    await new Promise((resolve) => setImmediate(resolve)); // the reply: no retention
    learner.responseEnded(ticket(0), tail(usage(2_560, 2_048)));
    expect(calls).toHaveLength(1);
  });

  it('takes no lesson from a request routed before its engine restarted (an empty cache is no eviction)', () => {
    const { learner, calls, ticket } = setup({ lastRestartMs: () => 60_000 });
    learner.responseEnded(ticket(30, 59_000), tail(usage(2_560, 0)));
    expect(calls).toHaveLength(0);
    learner.responseEnded(ticket(30, 61_000), tail(usage(2_560, 0)));
    expect(calls).toHaveLength(1);
  });

  it('takes timing samples only from streams (a non-streaming body has no TTFT)', () => {
    const { learner, calls, ticket, advance } = setup();
    const streamed = ticket(0);
    learner.firstOutput(streamed, performance.now() - 200, true);
    learner.responseEnded(streamed, tail(usage(2_560, 0)));
    const plain = ticket(0);
    learner.firstOutput(plain, performance.now() - 900, false);
    learner.responseEnded(plain, tail(usage(2_560, 0)));
    advance(1_000);
    learner.responseEnded(ticket(0), tail(usage(2_560, 0)));
    const batch = calls.at(-1)?.calibration;
    expect(batch?.prefillMsPerToken?.samples).toBe(1);
    expect((batch?.prefillMsPerToken?.sum ?? 0) * 2_560).toBeGreaterThan(150);
    expect(batch?.bytesPerToken?.samples).toBe(3);
  });
});
