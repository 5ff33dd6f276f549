import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EventSubscriber, handBlockDigests, lastEightBytes, settle, startEventSim } from './kv-events-support';
import { scrapeMetrics, startTestSim, type TestSim } from './start-test-sim';

const range = (from: number, count: number) => Array.from({ length: count }, (_, i) => from + i);

async function complete(url: string, prompt: number[], rank?: string, maxTokens = 1) {
  const response = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(rank === undefined ? {} : { 'X-Data-Parallel-Rank': rank }) },
    body: JSON.stringify({ prompt, max_tokens: maxTokens }),
  });
  return { status: response.status, json: (await response.json()) as any };
}

/** A counter's value per `engine` label. */
async function perEngine(url: string, name: string): Promise<Map<string, number>> {
  const family = (await scrapeMetrics(url)).get(name);
  return new Map((family?.metrics ?? []).map((metric) => [metric.labels?.engine ?? '?', Number(metric.value)]));
}

describe('vllm-sim --data-parallel-size 4', () => {
  let sim: TestSim & { port: number };
  let subscribers: EventSubscriber[];
  beforeAll(async () => {
    sim = await startEventSim({ dataParallelSize: 4 });
    subscribers = range(0, 4).map((rank) => new EventSubscriber('127.0.0.1', sim.port + rank));
    await settle();
  });
  afterAll(async () => {
    for (const subscriber of subscribers) subscriber.close();
    await sim.close();
  });

  it('runs a request on the rank its X-data-parallel-rank names: that rank caches it, publishes it, counts it', async () => {
    const prompt = range(3000, 48);
    expect((await complete(sim.url, prompt, '2')).status).toBe(200);
    const again = await complete(sim.url, prompt, ' 2 ');
    expect(again.json.usage.prompt_tokens_details?.cached_tokens).toBe(32);
    const elsewhere = await complete(sim.url, prompt, '3');
    expect(elsewhere.json.usage.prompt_tokens_details?.cached_tokens ?? 0).toBe(0);

    await (subscribers[2] as EventSubscriber).waitFor((received) => received.length > 0);
    const stored = (subscribers[2] as EventSubscriber).events.find(({ event }) => event.type === 'BlockStored');
    expect(stored?.rank).toBe(2);
    expect(stored?.event.block_hashes).toEqual(handBlockDigests('42', prompt).map(lastEightBytes));
    await (subscribers[3] as EventSubscriber).waitFor((received) => received.length > 0);
    expect((subscribers[3] as EventSubscriber).received.every(({ batch }) => batch[2] === 3)).toBe(true);
    expect((subscribers[0] as EventSubscriber).received).toHaveLength(0);

    const queries = await perEngine(sim.url, 'vllm:prefix_cache_queries_total');
    expect([...queries.keys()]).toEqual(['0', '1', '2', '3']);
    expect([queries.get('0'), queries.get('1'), queries.get('2'), queries.get('3')]).toEqual([0, 0, 96, 48]);
    const hits = await perEngine(sim.url, 'vllm:prefix_cache_hits_total');
    expect(hits.get('2')).toBe(32);
    const debug: any = await (await fetch(`${sim.url}/debug/kv-cache`)).json();
    // Rank 2's repeat recomputed its last block (a hit stops one token short) and registered a second copy,
    // as vLLM does (no de-duplication): two blocks under one hash, each stored in its own BlockStored.
    expect(debug.ranks.map((rank: { num_blocks: number }) => rank.num_blocks)).toEqual([0, 0, 4, 3]);
    const rank2Hashes = debug.ranks[2].blocks.map((block: { block_hash: string }) => block.block_hash);
    expect(new Set(rank2Hashes).size).toBe(3);
  });

  it('answers 400 in the OpenAI error shape for a rank outside [0, 4), and ignores a header int() cannot parse', async () => {
    for (const rank of ['4', '-1', '1_000']) {
      const refused = await complete(sim.url, range(1, 20), rank);
      expect(refused.status).toBe(400);
      expect(refused.json.error).toMatchObject({
        message: `data_parallel_rank ${rank.replace('_', '')} is out of range [0, 4).`,
        type: 'BadRequestError',
      });
    }
    expect((await complete(sim.url, range(1, 20), 'two')).status).toBe(200);
  });

  it('balances requests without the header by 4 · waiting + running: a burst reaches every rank', async () => {
    const lookups = async (): Promise<number[]> => {
      const state: any = await (await fetch(`${sim.url}/sim/state`)).json();
      expect(state.data_parallel_ranks).toHaveLength(4);
      return state.data_parallel_ranks.map(
        (rank: { prefix_cache_queries_tokens: number }) => rank.prefix_cache_queries_tokens,
      );
    };
    const before = await lookups();
    // Long enough (400 decode steps, ~0.2 s of wall time) that all eight are in flight together.
    const burst = await Promise.all(
      range(0, 8).map((i) => complete(sim.url, range(10_000 + i * 1000, 200), undefined, 400)),
    );
    expect(burst.every(({ status }) => status === 200)).toBe(true);
    const prompts = (await lookups()).map((tokens, rank) => (tokens - (before[rank] as number)) / 200);
    expect(prompts.reduce((sum, count) => sum + count, 0)).toBe(8);
    // Exactly two each when all eight are still waiting; a rank whose two already run (score 2) can take a
    // third before another's waiting one (score 4) is admitted, so allow one either way.
    for (const count of prompts) {
      expect(count).toBeGreaterThanOrEqual(1);
      expect(count).toBeLessThanOrEqual(3);
    }
  });
});

describe('vllm-sim data parallel needs the vLLM dialect', () => {
  it('refuses --data-parallel-size 2 with another metrics dialect at start', async () => {
    await expect(startTestSim({ dataParallelSize: 2, metricsDialect: 'sglang' })).rejects.toThrow(
      /metrics-dialect vllm/,
    );
  });
});
