import { createSimServer } from '@kvroute/vllm-sim';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { generateSessions, SEED_SESSIONS, wordText, type CompletionEvent } from '../workloads';
import { boundPct } from '../report';
import {
  BOUND_SIM_TIME_SCALE,
  boundTotals,
  CompulsoryBound,
  MIN_BOUND_BLOCKS,
  estimateBoundBlocks,
  textBoundBlocks,
  type BoundSimHandle,
} from './compulsory-bound';
import { driveWorkload } from './drive-workload';
import { createClientAgent } from './request-client';
import type { Workload } from './scenario';

/** In-process vllm-sims (real HTTP on loopback) as the replay sim: what the local cluster starts as a process. */
const started: number[] = [];
const stopped: number[] = [];
async function startSim(numGpuBlocks: number): Promise<BoundSimHandle> {
  const sim = await createSimServer(
    SimConfig.parse({ port: 0, profile: 'fast', model: 'm', numGpuBlocks, timeScale: BOUND_SIM_TIME_SCALE }),
  );
  const url = await sim.listen();
  started.push(numGpuBlocks);
  return {
    url,
    numGpuBlocks,
    stop: async () => {
      stopped.push(numGpuBlocks);
      await sim.close();
    },
  };
}

const agent = createClientAgent();
const logs: string[] = [];
let bound: CompulsoryBound | undefined;
afterEach(async () => {
  await bound?.close();
  bound = undefined;
  started.length = 0;
  stopped.length = 0;
  logs.length = 0;
});
afterAll(() => agent.close());

function completion(id: string, prompt: string, atMs: number, maxTokens = 4): CompletionEvent {
  return { id, atMs, kind: 'completion', prompt, maxTokens };
}

describe('the compulsory-miss bound', () => {
  it(
    'counts, per request, the full 16-token blocks some earlier request had, as the sim counts ' +
      'hits (a fully cached prompt still computes its last token)',
    async () => {
      bound = new CompulsoryBound({ startSim, agent, log: (line) => void logs.push(line) });
      const shared = wordText(160, 1); // exactly 160 tokens: 10 blocks
      const workload: Workload = {
        kind: 'events',
        events: [
          completion('a', shared, 0), // cold: 0 of 160
          completion('b', shared + wordText(40, 2), 5_000), // a's 10 blocks: 160 of 200
          completion('c', shared, 9_000), // all cached, but the last token is computed: 9 blocks, 144 of 160
          completion('d', wordText(100, 3), 9_500), // nothing shared: 0 of 100
        ],
      };
      const result = await bound.compute(workload, 7);
      expect(result).toEqual({
        seed: 7,
        requests: 4,
        failed: 0,
        promptTokens: 620,
        cachedTokens: 304,
        evictedBlocks: 0,
        numGpuBlocks: MIN_BOUND_BLOCKS,
      });
      expect(boundPct(result)).toBeCloseTo((100 * 304) / 620, 10);
    },
  );

  it('is reached by no placement: the same sessions driven concurrently through that very sim hit less or as much', async () => {
    const sessions = generateSessions({
      ...SEED_SESSIONS,
      sessions: 3,
      turns: 3,
      systemPromptBytes: 1024,
      codeContextBytes: 0,
      maxTokens: 8,
      filler: 'words',
      startJitterMs: 0,
      thinkMs: 0,
      seed: 3,
    });
    const workload: Workload = { kind: 'sessions', sessions };
    bound = new CompulsoryBound({ startSim, agent, log: (line) => void logs.push(line) });
    const result = await bound.compute(workload, 3);
    expect(result.requests).toBe(9);
    expect(result.failed).toBe(0);
    // Turns 1 and 2 carry their conversation back, replies included: most of every prompt but the first few is cached.
    expect(boundPct(result)).toBeGreaterThan(60);

    const sim = await startSim(MIN_BOUND_BLOCKS);
    try {
      const driven = await driveWorkload(workload, {
        routers: [sim.url],
        model: 'm',
        agent,
        maxRunMs: 60_000,
        maxInflight: 16,
      });
      const concurrent = boundTotals(driven.requests);
      expect(concurrent.promptTokens).toBe(result.promptTokens); // the same requests, replies included
      expect(concurrent.cachedTokens).toBeLessThanOrEqual(result.cachedTokens);
    } finally {
      await sim.stop();
    }
  });

  it('checks that its cache was infinite: a replay that evicted runs again with 4× the blocks, and reports what still evicted', async () => {
    const workload: Workload = {
      kind: 'events',
      events: [0, 1, 2, 3, 4].map((index) => completion(`e${index}`, wordText(200, 10 + index), index)),
    };
    bound = new CompulsoryBound({ startSim, agent, log: (line) => void logs.push(line), sizeBlocks: () => 40 });
    const result = await bound.compute(workload, 1);
    // 5 distinct 200-token prompts need 65 blocks: 39 usable blocks evict, 159 do not.
    expect(started).toEqual([40, 160]);
    expect(stopped).toEqual([40]);
    expect(result).toMatchObject({ evictedBlocks: 0, numGpuBlocks: 160, cachedTokens: 0, promptTokens: 1000 });
    expect(logs.join('\n')).toMatch(/evicted \d+ blocks with 40: again with 160/);

    const capped = new CompulsoryBound({
      startSim,
      agent,
      log: (line) => void logs.push(line),
      sizeBlocks: () => 40,
      maxBlocks: 40,
    });
    try {
      const evicting = await capped.compute(workload, 2);
      expect(evicting.evictedBlocks).toBeGreaterThan(0);
      expect(boundPct(evicting)).toBeUndefined();
      expect(logs.at(-1)).toMatch(/no bound for this seed/);
    } finally {
      await capped.close();
    }
  });

  it('keeps its sim for the next workload that fits, and replays the next on a cold cache', async () => {
    bound = new CompulsoryBound({ startSim, agent, log: (line) => void logs.push(line) });
    const workload: Workload = { kind: 'events', events: [completion('a', wordText(64, 5), 0)] };
    expect((await bound.compute(workload, 1)).cachedTokens).toBe(0);
    expect((await bound.compute(workload, 1)).cachedTokens).toBe(0);
    expect(started).toHaveLength(1);
  });
});

describe('estimateBoundBlocks', () => {
  const events = (prompts: readonly string[]): Workload => ({
    kind: 'events',
    events: prompts.map((prompt, index) => completion(`e${index}`, prompt, index, 16)),
  });

  it('counts a shared prefix once and every request apart for its generation and partial blocks', () => {
    const prefix = wordText(20_000, 1); // 80 kB
    const one = textBoundBlocks(events([prefix + wordText(10, 2)]));
    const two = textBoundBlocks(events([prefix + wordText(10, 2), prefix + wordText(10, 3)]));
    const slack = 1 + 72; // 16 tokens of generation = 1 block, plus the per-request slack
    expect(two - one).toBeLessThanOrEqual(slack + Math.ceil(256 / 2.5 / 16));
    expect(two - one).toBeGreaterThanOrEqual(slack);
    // 80 kB of text at ≥ 2.5 bytes per token, in 16-token blocks, at least.
    expect(one).toBeGreaterThanOrEqual(Math.ceil(80_000 / 2.5 / 16));
  });

  it('is at least MIN_BOUND_BLOCKS, and over-estimates what a replay needed', () => {
    expect(estimateBoundBlocks(events(['x']))).toBe(MIN_BOUND_BLOCKS);
    // The 5 distinct 200-token prompts above need 65 blocks plus generation.
    expect(textBoundBlocks(events([0, 1, 2, 3, 4].map((index) => wordText(200, 10 + index))))).toBeGreaterThan(65 + 5);
  });
});
