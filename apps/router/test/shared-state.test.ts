import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { startRedis, type TestRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';

/**
 * Replicas that share state in Redis route as one: 3 router replicas (in this process) over the same
 * 4 backends, a client that sends each request to the next replica in turn, 12 concurrent 6-turn
 * conversations with a shared system prompt. With Redis every turn stays on its conversation's first
 * backend whichever replica routes it, and the cache hit rate matches a single replica's; with
 * per-replica state it falls.
 */
const SYSTEM = `You are the assistant of a routing team. ${'Cite the runbook section you used. '.repeat(60)}`;

interface Cluster {
  sims: Array<{ url: string; sim: SimServer }>;
  routers: RouterServer[];
  urls: string[];
}

async function startCluster(replicas: number, redisUrl: string | undefined, policy: 'cacheaware' | 'prefixaware' = 'cacheaware'): Promise<Cluster> {
  const sims = await Promise.all(
    Array.from({ length: 4 }, async () => {
      const sim = await createSimServer(SimConfig.parse({ port: 0, profile: 'a100-7b', timeScale: 50, model: 'test-model' }));
      return { url: await sim.listen(), sim };
    }),
  );
  const routers: RouterServer[] = [];
  const urls: string[] = [];
  for (let index = 0; index < replicas; index++) {
    const router = await createRouterServer(
      RouterConfig.parse({ host: '127.0.0.1', port: 0, backends: sims.map((sim) => sim.url), policy, ...(redisUrl ? { redisUrl, redisTimeoutMs: 200 } : {}) }),
    );
    routers.push(router);
    urls.push(await router.listen());
  }
  return { sims, routers, urls };
}

async function stopCluster(cluster: Cluster): Promise<void> {
  if (process.env.DEBUG_MOVES) {
    for (const router of cluster.routers) {
      const text = await router.metrics.registry.metrics();
      console.info('degraded transitions:', text.split('\n').filter((line) => line.startsWith('kvroute_router_state_degraded_transitions_total')).join(' | ') || 'none');
    }
  }
  for (const router of cluster.routers) await router.close();
  await Promise.all(cluster.sims.map((sim) => sim.sim.close()));
}

interface Turn {
  conversation: number;
  backend: string;
  reason: string;
  prompt: number;
  cached: number;
}

async function runConversations(urls: readonly string[], sharedSystemPrompt = true): Promise<Turn[]> {
  const turns: Turn[] = [];
  let next = 0;
  await Promise.all(
    Array.from({ length: 12 }, async (_, conversation) => {
      await new Promise((resolve) => setTimeout(resolve, conversation * 15));
      const messages: Array<{ role: string; content: string }> = [
        { role: 'system', content: sharedSystemPrompt ? SYSTEM : `Conversation ${conversation}. ${SYSTEM}` },
        { role: 'user', content: `Conversation ${conversation} context: ${`item ${conversation} detail; `.repeat(150)}` },
      ];
      for (let turn = 0; turn < 6; turn++) {
        const url = urls[next++ % urls.length] as string;
        const response = await fetch(`${url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'test-model', messages, max_tokens: 8 }),
        });
        const body = (await response.json()) as { choices: Array<{ message: { content: string } }>; usage: { prompt_tokens: number; prompt_tokens_details?: { cached_tokens: number } | null } };
        turns.push({
          conversation,
          backend: response.headers.get('x-router-backend') ?? '',
          reason: response.headers.get('x-router-reason') ?? '',
          prompt: body.usage.prompt_tokens,
          cached: body.usage.prompt_tokens_details?.cached_tokens ?? 0,
        });
        messages.push({ role: 'assistant', content: body.choices[0]?.message.content ?? '' }, { role: 'user', content: `Follow-up ${turn}: and item ${turn * 3}?` });
      }
    }),
  );
  return turns;
}

function hitRate(turns: readonly Turn[]): number {
  return turns.reduce((sum, turn) => sum + turn.cached, 0) / turns.reduce((sum, turn) => sum + turn.prompt, 0);
}

/**
 * Turns that changed backend without a spill and lost cache by it. A turn may go back to an earlier
 * backend that holds the same number of 256-byte routing blocks (a turn adds less than a block): that
 * backend still serves all but the last few tokens from cache, so it is not a move. A real move shows
 * as cached tokens falling short of the previous turn's prompt by more than a block (~64 tokens).
 */
function unexplainedMoves(turns: readonly Turn[]): number {
  let moves = 0;
  for (let conversation = 0; conversation < 12; conversation++) {
    let previous: Turn | undefined;
    for (const turn of turns.filter((candidate) => candidate.conversation === conversation)) {
      const moved = previous !== undefined && turn.backend !== previous.backend && !turn.reason.startsWith('spilled');
      if (moved && previous !== undefined && turn.cached < previous.prompt - 64) {
        if (process.env.DEBUG_MOVES) console.info('move', conversation, JSON.stringify(turns.filter((candidate) => candidate.conversation === conversation)));
        moves++;
      }
      previous = turn;
    }
  }
  return moves;
}

describe('router replicas sharing state in Redis', () => {
  let redis: TestRedis;
  beforeAll(async () => {
    redis = await startRedis({ fresh: true });
  });
  afterAll(() => redis.stop());

  it('route with shared state: three replicas over one Redis keep the hit rate of a single replica, never degraded', async () => {
    const single = await startCluster(1, undefined);
    const singleTurns = await runConversations(single.urls).finally(() => stopCluster(single));
    const shared = await startCluster(3, redis.url);
    const degradedBefore = await Promise.all(shared.routers.map((router) => router.metrics.registry.getSingleMetricAsString('kvroute_router_state_degraded')));
    const sharedTurns = await runConversations(shared.urls).finally(() => stopCluster(shared));
    console.info(`cacheaware hit rate: 1 replica ${hitRate(singleTurns).toFixed(3)}, 3 replicas sharing Redis ${hitRate(sharedTurns).toFixed(3)}; moves ${unexplainedMoves(sharedTurns)}`);
    expect(degradedBefore.every((text) => /^kvroute_router_state_degraded 0$/m.test(text))).toBe(true);
    expect(sharedTurns).toHaveLength(72);
    expect(unexplainedMoves(sharedTurns)).toBe(0);
    // One run of this workload varies by ±3 points by itself (timing decides spills); the 2-point
    // acceptance figure is for the averaged multi-process e2e benchmark. Here: no real loss.
    expect(hitRate(sharedTurns)).toBeGreaterThanOrEqual(hitRate(singleTurns) - 0.05);
  });
});
