import { startRedis } from '@kvroute/testing';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { startTestCluster, waitFor, type TestCluster } from './start-test-cluster';

/**
 * The learn stage closes the loop through every response, end to end with a vllm-sim backend and the
 * official `openai` client: an engine that evicted what the index believed it held teaches the router
 * after one response, and the cost model's bytes per token is learned from the engines' usage.
 */

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function conversation(topic: string): OpenAI.Chat.ChatCompletionMessageParam[] {
  return [
    {
      role: 'system',
      content: `Reference document on ${topic}. ${`The ${topic} section explains every setting in detail. `.repeat(60)}`,
    },
    { role: 'user', content: `Summarise the ${topic} document.` },
  ];
}

async function debugMatch(
  cluster: TestCluster,
  messages: OpenAI.Chat.ChatCompletionMessageParam[],
): Promise<{ match: number; body: DebugRoute }> {
  const response = await cluster.debugRoute(JSON.stringify({ model: 'test-model', messages }));
  const body = (await response.json()) as DebugRoute;
  expect(response.status).toBe(200);
  const scores = body.decision.scores ?? [];
  return { match: Math.max(0, ...scores.map((score) => score.matchBlocks ?? 0)), body };
}

interface DebugRoute {
  decision: { scores?: { backendId: string; matchBlocks?: number }[] };
  costModel: {
    configured: Record<string, number>;
    learned: Record<string, { value: number; samples: number }>;
    inUse: Record<string, number>;
  };
  retentionMs: Record<string, number | null>;
}

async function predictionOutcomes(cluster: TestCluster): Promise<Record<string, number>> {
  const metrics = await (await fetch(`${cluster.opsUrl}/metrics`)).text();
  const outcomes: Record<string, number> = {};
  for (const line of metrics.split('\n')) {
    const match = /^kvroute_router_prefix_predictions_total\{.*outcome="(\w+)".*\} (\d+)/.exec(line);
    if (match) outcomes[match[1] as string] = (outcomes[match[1] as string] ?? 0) + Number(match[2]);
  }
  return outcomes;
}

describe('learning from responses', () => {
  it('an engine that evicted a prefix: after one response the router no longer predicts what it lost, and predicts what it computed again', async () => {
    const cluster = await startTestCluster({
      backends: 1,
      router: { debugRoutes: true, learnFromResponses: true, evictionEvidenceMinAgeMs: 300, calibrateCostModel: false },
    });
    try {
      const client = new OpenAI({ baseURL: `${cluster.routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
      const older = conversation('storage');
      const newer = conversation('networking');
      await client.chat.completions.create({ model: 'test-model', messages: older, max_tokens: 4 });
      // A second turn hits: the backend is seen reporting cached tokens (vLLM leaves out a 0).
      const warm = await client.chat.completions.create({ model: 'test-model', messages: older, max_tokens: 4 });
      expect(warm.usage?.prompt_tokens_details?.cached_tokens ?? 0).toBeGreaterThan(0);
      await sleep(700);
      await client.chat.completions.create({ model: 'test-model', messages: newer, max_tokens: 4 });
      expect((await debugMatch(cluster, older)).match).toBeGreaterThan(10);
      expect((await debugMatch(cluster, newer)).match).toBeGreaterThan(10);

      // The engine loses everything (as under KV pressure); the router does not know yet.
      await sleep(500);
      const reset = await fetch(`${cluster.sims[0]?.url}/sim/reset-cache`, { method: 'POST' });
      expect(reset.status).toBe(200);
      const before = await predictionOutcomes(cluster);
      const turn = await client.chat.completions.create({ model: 'test-model', messages: newer, max_tokens: 4 });
      expect(turn.usage?.prompt_tokens_details?.cached_tokens ?? 0).toBe(0);
      const after = await predictionOutcomes(cluster);
      expect((after.overpredicted ?? 0) - (before.overpredicted ?? 0)).toBe(1);

      // One response later: the older prefix (less recently used than the block found gone) is no
      // longer predicted; the one the engine just computed again is, and the engine confirms it.
      const { match: olderMatch, body } = await debugMatch(cluster, older);
      expect(olderMatch).toBe(0);
      const backendId = cluster.sims[0]?.id as string;
      expect(body.retentionMs[backendId]).toBeGreaterThanOrEqual(300);
      expect((await debugMatch(cluster, newer)).match).toBeGreaterThan(10);
      await client.chat.completions.create({ model: 'test-model', messages: newer, max_tokens: 4 });
      const last = await predictionOutcomes(cluster);
      expect((last.confirmed ?? 0) - (after.confirmed ?? 0)).toBe(1);
    } finally {
      await cluster.close();
    }
  });

  // The evidence is the evicted entry's age when the request was routed, read by the decision: by the
  // response, the request's own first output has refreshed that entry once it is older than half the
  // retention, and an age read then would be none (the retention could only ratchet down).
  it.each(['in-memory', 'redis'] as const)(
    'a second eviction, older than half the retention, still moves it (%s state)',
    async (kind) => {
      const redis = kind === 'redis' ? await startRedis({ fresh: true }) : null;
      const cluster = await startTestCluster({
        backends: 1,
        router: {
          debugRoutes: true,
          learnFromResponses: true,
          evictionEvidenceMinAgeMs: 300,
          calibrateCostModel: false,
          ...(redis ? { redisUrl: redis.url } : {}),
        },
      });
      try {
        const client = new OpenAI({ baseURL: `${cluster.routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
        const backendId = cluster.sims[0]?.id as string;
        const ask = (messages: OpenAI.Chat.ChatCompletionMessageParam[]) =>
          client.chat.completions.create({ model: 'test-model', messages, max_tokens: 4 });
        const evict = async () =>
          expect((await fetch(`${cluster.sims[0]?.url}/sim/reset-cache`, { method: 'POST' })).status).toBe(200);
        const retention = async () => (await debugMatch(cluster, first)).body.retentionMs[backendId] ?? null;
        const first = conversation('storage');
        const second = conversation('networking');
        await ask(first);
        await ask(first); // a hit: the backend is seen reporting cached tokens

        // 1. First evidence: the retention becomes its age (about 1.3 s).
        await sleep(1_300);
        await evict();
        expect((await ask(first)).usage?.prompt_tokens_details?.cached_tokens ?? 0).toBe(0);
        await waitFor(async () => (await retention()) !== null); // the learn call runs after the response
        const learned = (await retention()) as number;
        expect(learned).toBeGreaterThanOrEqual(1_300);

        // 2. Evidence past half of it (still visible when routed): the turn's first output refreshes the entry.
        await ask(second);
        await sleep(900);
        expect((await debugMatch(cluster, second)).match).toBeGreaterThan(10);
        await evict();
        expect((await ask(second)).usage?.prompt_tokens_details?.cached_tokens ?? 0).toBe(0);
        await waitFor(async () => (await retention()) !== learned);
        const moved = (await retention()) as number;
        // 0.7 · learned + 0.3 · (the evidence's age, 900 ms up to `learned`).
        expect(moved).toBeLessThan(learned);
        expect(moved).toBeGreaterThanOrEqual(Math.floor(0.7 * learned + 0.3 * 900));
      } finally {
        await cluster.close();
        await redis?.stop();
      }
    },
  );

  it('a backend that reports no cached tokens runs open loop: /readyz and the metric say so, its predictions stay unverified and correct nothing', async () => {
    const cluster = await startTestCluster({
      sims: [{ promptTokensDetails: true }, { promptTokensDetails: false }],
      router: { debugRoutes: true, policy: 'roundrobin' },
    });
    try {
      const client = new OpenAI({ baseURL: `${cluster.routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
      const messages = conversation('open loop');
      for (let request = 0; request < 6; request++)
        await client.chat.completions.create({ model: 'test-model', messages, max_tokens: 4 });
      const [reporting, silent] = cluster.sims.map((sim) => sim.id) as [string, string];
      const ready = (await (await fetch(`${cluster.opsUrl}/readyz`)).json()) as {
        feedback: Record<string, string>;
        cacheView: Record<string, string>;
      };
      expect(ready.feedback).toEqual({ [reporting]: 'cached-tokens', [silent]: 'open-loop' });
      expect(ready.cacheView).toEqual({ [reporting]: 'closed-loop', [silent]: 'open-loop' });
      const metrics = await (await fetch(`${cluster.opsUrl}/metrics`)).text();
      expect(metrics).toContain(`kvroute_router_cache_view{backend="${reporting}",view="closed-loop"} 1`);
      expect(metrics).toContain(`kvroute_router_cache_view{backend="${silent}",view="open-loop"} 1`);
      expect(metrics).toContain(`kvroute_router_cache_view{backend="${silent}",view="events"} 0`);
      expect(metrics).toContain(`kvroute_router_backend_reports_cached_tokens{backend="${reporting}"} 1`);
      expect(metrics).toContain(`kvroute_router_backend_reports_cached_tokens{backend="${silent}"} 0`);
      expect(metrics).toContain(`kvroute_router_prefix_predictions_total{backend="${silent}",outcome="unverified"} 3`);
      expect(metrics).not.toMatch(
        new RegExp(
          `kvroute_router_prefix_predictions_total\\{backend="${silent}",outcome="(confirmed|overpredicted|underpredicted)"\\}`,
        ),
      );
      const { body } = await debugMatch(cluster, messages);
      expect(body.retentionMs[silent]).toBeNull();
    } finally {
      await cluster.close();
    }
  });

  it("learns the pool's bytes per token from the engines' prompt tokens and routes on it once enough samples back it", async () => {
    const cluster = await startTestCluster({ backends: 2, router: { debugRoutes: true, calibrationFlushMs: 1 } });
    try {
      const client = new OpenAI({ baseURL: `${cluster.routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
      let bytes = 0;
      let tokens = 0;
      for (let request = 0; request < 24; request++) {
        const messages = conversation(`topic ${request}`);
        const stream = await client.chat.completions.create({
          model: 'test-model',
          messages,
          max_tokens: 4,
          stream: true,
          stream_options: { include_usage: true },
        });
        for await (const chunk of stream) tokens += chunk.usage?.prompt_tokens ?? 0;
        const { body } = await debugMatch(cluster, messages);
        bytes += (body as unknown as { textBytes: number }).textBytes;
        await sleep(2); // past the flush interval
      }
      const { body } = await debugMatch(cluster, conversation('anything'));
      const learned = body.costModel.learned.bytesPerToken;
      expect(learned?.samples).toBeGreaterThanOrEqual(20);
      // The router's routing-text bytes over the engine's prompt tokens: the ratio the cost model needs.
      expect(learned?.value).toBeCloseTo(bytes / tokens, 1);
      expect(body.costModel.configured.bytesPerToken).toBe(4);
      // In use: the learned figure (the policy is rebuilt when it moves by 2 % or more).
      expect(
        Math.abs((body.costModel.inUse.bytesPerToken ?? 0) - (learned?.value ?? 0)) / (learned?.value ?? 1),
      ).toBeLessThan(0.02);
    } finally {
      await cluster.close();
    }
  });
});
