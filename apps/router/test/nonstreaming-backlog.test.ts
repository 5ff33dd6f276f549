/**
 * A non-streaming request's prefill leaves its backend's backlog (the pending prefill tokens the cost rule
 * charges the requests routed after it) at its estimated end of prefill, not at its response: a response
 * that is not streamed says nothing until its whole generation is done, so before, a backend serving such
 * requests counted their prompts as prefill still to come for seconds after the engine had done them, and
 * every such backend looked equally busy (issue 30's noisy neighbour). Real Redis, a real sim and router.
 */
import { startRedis, type TestRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestCluster, waitFor, type TestCluster } from './start-test-cluster';

describe("a non-streaming request's prefill and its backend's backlog", () => {
  let redis: TestRedis;
  let cluster: TestCluster;

  beforeAll(async () => {
    redis = await startRedis();
    cluster = await startTestCluster({
      backends: 1,
      // A 70B profile in real time: its 100 output tokens take seconds, its prefill a fraction of one.
      sim: { profile: 'a100-70b-tp4', timeScale: 1 },
      router: { redisUrl: redis.url },
    });
  });
  afterAll(async () => {
    await cluster?.close();
    await redis?.stop();
  });

  const backendFigures = async (): Promise<{ pending: number; inflight: number }> => {
    const id = cluster.sims[0]?.id as string;
    const snapshot = await cluster.router.state.snapshot('test-model', [id], []);
    return { pending: snapshot.pendingPrefillTokens.get(id) ?? 0, inflight: snapshot.inflight.get(id) ?? 0 };
  };

  it('leaves the backlog while the request still runs, long before its response', async () => {
    const started = performance.now();
    const response = fetch(`${cluster.routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'test-model',
        messages: [{ role: 'user', content: `Summarise this. ${'A routing table entry for each block. '.repeat(60)}` }],
        max_tokens: 100,
        ignore_eos: true,
      }),
    }).then(async (answer) => ({ status: answer.status, body: await answer.text(), atMs: performance.now() }));
    // Routed: in flight, its prompt in the backlog.
    await waitFor(async () => (await backendFigures()).inflight === 1, 5_000);
    // Out of the backlog while it generates.
    await waitFor(async () => {
      const figures = await backendFigures();
      return figures.pending === 0 && figures.inflight === 1;
    }, 5_000);
    const clearedAfterMs = performance.now() - started;
    const done = await response;
    expect(done.status, done.body).toBe(200);
    const respondedAfterMs = done.atMs - started;
    console.info(
      `[nonstreaming-backlog] out of the backlog after ${clearedAfterMs.toFixed(0)} ms, answered after ${respondedAfterMs.toFixed(0)} ms`,
    );
    expect(clearedAfterMs).toBeLessThan(respondedAfterMs / 2);
    // Released with its response (the release call may still be on its way when the body has arrived).
    await waitFor(async () => (await backendFigures()).inflight === 0, 5_000);
    expect((await backendFigures()).pending).toBe(0);
  });
});
