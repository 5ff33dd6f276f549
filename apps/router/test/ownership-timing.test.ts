import { describe, expect, it } from 'vitest';
import { startTestCluster, totalInflight, waitFor } from './start-test-cluster';

/**
 * When a backend starts to count as holding a request's prefix (`ownershipAt`). cacheaware's default
 * is the first token: until then the engine has not computed the prefix, so a sibling sent there
 * would compute it again, queued behind the first. The seed routers record at routing.
 */
type Explained = {
  decision: { kind: string; backendId: string; reason: string; scores: { backendId: string; matchBlocks: number }[] };
};

async function observeOwnership(ownershipAt: 'first-token' | 'routing'): Promise<{
  whilePrefilling: number;
  afterFirstToken: number;
  home: string;
  next: { backend: string | null; reason: string | null };
}> {
  // a100-7b at time-scale 1: the ~6k-token prompt takes ~0.4 s to prefill, ample time to look meanwhile.
  const cluster = await startTestCluster({
    backends: 2,
    sim: { profile: 'a100-7b', timeScale: 1 },
    router: { debugRoutes: true, ownershipAt },
  });
  try {
    const prompt = `Summarise this log. ${'event ok latency normal; '.repeat(1000)}`;
    const bodyOf = (question: string, stream: boolean) =>
      JSON.stringify({
        model: 'test-model',
        messages: [{ role: 'user', content: `${prompt}\n${question}` }],
        max_tokens: 4,
        stream,
      });
    const post = (path: string, body: string) =>
      fetch(`${cluster.routerUrl}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const heldBlocks = async (backend: string): Promise<number> => {
      const explained = (await (await cluster.debugRoute(bodyOf('probe', false))).json()) as Explained;
      return explained.decision.scores.find((score) => score.backendId === backend)?.matchBlocks ?? 0;
    };

    const first = await post('/v1/chat/completions', bodyOf('first', true));
    const home = first.headers.get('x-router-backend') as string;
    // Response headers come at once; the first content chunk only when the prefill is done.
    const whilePrefilling = await heldBlocks(home);
    const reader = (first.body as ReadableStream<Uint8Array>).getReader();
    let text = '';
    while (!text.includes('"content"')) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    // The router records on the first content chunk it relays; the client may see it a moment before.
    let afterFirstToken = 0;
    await waitFor(async () => (afterFirstToken = await heldBlocks(home)) > 0, 2000).catch(() => undefined);
    while (!(await reader.read()).done);
    const second = await post('/v1/chat/completions', bodyOf('second', false));
    await second.text();
    expect(totalInflight(cluster.router)).toBe(0);
    return {
      whilePrefilling,
      afterFirstToken,
      home,
      next: { backend: second.headers.get('x-router-backend'), reason: second.headers.get('x-router-reason') },
    };
  } finally {
    await cluster.close();
  }
}

describe('ownership of a prefix', () => {
  it('cacheaware (default): counts from the first token, not while the prefill runs', async () => {
    const seen = await observeOwnership('first-token');
    expect(seen.whilePrefilling).toBe(0);
    expect(seen.afterFirstToken).toBeGreaterThan(20);
    expect(seen.next).toEqual({ backend: seen.home, reason: 'prefix-affinity' });
  });

  it('ownershipAt routing: counts from the moment the request is routed (the seed routers)', async () => {
    const seen = await observeOwnership('routing');
    expect(seen.whilePrefilling).toBeGreaterThan(20);
    expect(seen.next).toEqual({ backend: seen.home, reason: 'prefix-affinity' });
  });
});
