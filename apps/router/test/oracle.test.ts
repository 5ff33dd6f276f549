import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startTestCluster, totalInflight, type TestCluster } from './start-test-cluster';

/**
 * `oracle` over real vllm-sim backends: the router asks each sim's /sim/match and sends the request
 * where the sim itself says its prefix is cached, whatever the router's own prefix index believes.
 */
describe('oracle policy', () => {
  let cluster: TestCluster;
  beforeAll(async () => {
    cluster = await startTestCluster({ backends: 2, router: { policy: 'oracle', debugRoutes: true } });
  });
  beforeEach(async () => {
    await Promise.all(cluster.sims.map((sim) => fetch(`${sim.url}/sim/reset-cache`, { method: 'POST' }).then((response) => response.text())));
  });
  afterAll(() => cluster.close());

  const bodyOf = (topic: string) => ({ model: 'test-model', messages: [{ role: 'user', content: `${topic}: ${'tell me what this long shared prompt is about. '.repeat(40)}` }], max_tokens: 4 });
  const post = async (url: string, body: unknown) => {
    const response = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    return { response, json: (await response.json()) as Record<string, unknown> };
  };

  it('sends a prompt to the sim that holds it, though the router never routed it there', async () => {
    const body = bodyOf('warmed behind the router');
    const warm = cluster.sims[1] as TestCluster['sims'][number];
    // Warmed on the second sim directly: the router's own index knows nothing of it.
    expect((await post(`${warm.url}/v1/chat/completions`, body)).response.status).toBe(200);
    const trueMatch = (await post(`${warm.url}/sim/match`, body)).json.cached_tokens as number;
    expect(trueMatch).toBeGreaterThan(0);

    const explained = (await post(`${cluster.routerUrl}/debug/route`, body)).json as { policy: string; decision: { backendId: string; reason: string; scores: { backendId: string; score: number }[] } };
    expect(explained.policy).toBe('oracle');
    expect(explained.decision).toMatchObject({ backendId: warm.id, reason: 'cache-hit' });
    expect(explained.decision.scores.map((score) => score.score)).toEqual([0, trueMatch]);

    const { response, json } = await post(`${cluster.routerUrl}/v1/chat/completions`, body);
    expect(response.status).toBe(200);
    expect(response.headers.get('x-router-backend')).toBe(warm.id);
    expect(response.headers.get('x-router-reason')).toBe('cache-hit');
    expect((json.usage as { prompt_tokens_details?: { cached_tokens?: number } }).prompt_tokens_details?.cached_tokens).toBe(trueMatch);
    expect(totalInflight(cluster.router)).toBe(0);
  });

  it('routes a prompt no sim holds to the least loaded (the first of equals)', async () => {
    const { response } = await post(`${cluster.routerUrl}/v1/chat/completions`, bodyOf('cold'));
    expect(response.status).toBe(200);
    expect(response.headers.get('x-router-backend')).toBe(cluster.sims[0]?.id);
    expect(response.headers.get('x-router-reason')).toBe('least-loaded');
  });
});
