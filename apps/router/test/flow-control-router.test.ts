import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestCluster, TEST_ADMIN_TOKEN, type TestCluster } from './start-test-cluster';

/**
 * Flow control through a real router (the queue stage, issue 30), one slow sim, room for one request:
 * what a client sees when its pool is saturated (the official `openai` client, retries off), and that a
 * client's chosen `X-Request-Id` cannot touch another request's place (the queue's ids are the router's).
 */
let cluster: TestCluster;
beforeAll(async () => {
  cluster = await startTestCluster({
    backends: 1,
    // ~10 ms a step: a 150-token answer holds its slot well over a second.
    sim: { profile: 'a100-7b' },
    router: {
      flowControl: true,
      flowMaxInflightPerBackend: 1,
      flowMaxQueueWaitMs: 300,
      adminToken: TEST_ADMIN_TOKEN,
    },
  });
});
afterAll(() => cluster.close());

const client = (requestId?: string): OpenAI =>
  new OpenAI({
    baseURL: `${cluster.routerUrl}/v1`,
    apiKey: 'unused',
    maxRetries: 0,
    ...(requestId === undefined ? {} : { defaultHeaders: { 'x-request-id': requestId } }),
  });

const long = { model: 'test-model', messages: [{ role: 'user' as const, content: 'hold the slot' }], max_tokens: 150 };

describe('flow control through the router', () => {
  it('sheds a request its saturated pool cannot start in time with 429 + Retry-After, and a client’s chosen id frees no one’s slot', async () => {
    // A holds the pool's one slot, under a client-chosen request id.
    const holder = await client('same-id').chat.completions.create({ ...long, stream: true });
    const reading = (async () => {
      let chunks = 0;
      for await (const _ of holder) chunks++;
      return chunks;
    })();
    // B, with the same id, waits out the deadline and is shed; /debug/flow shows it waiting meanwhile.
    const shedAt = performance.now();
    const waiting = client('same-id')
      .chat.completions.create(long)
      .catch((error: unknown) => error);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const flow = (await (
      await fetch(`${cluster.adminUrl}/debug/flow`, { headers: { authorization: `Bearer ${TEST_ADMIN_TOKEN}` } })
    ).json()) as { pools: Record<string, { waitingHere: number; queue: { inflight: number; queued: number } | null }> };
    expect(flow.pools['test-model']).toMatchObject({ waitingHere: 1, queue: { inflight: 1, queued: 1 } });
    const shed = await waiting;
    expect(shed).toBeInstanceOf(OpenAI.RateLimitError);
    const rateLimited = shed as InstanceType<typeof OpenAI.RateLimitError>;
    expect(rateLimited.code).toBe('ROUTER_ERR_POOL_SATURATED');
    expect(rateLimited.headers.get('retry-after')).toMatch(/^\d+$/);
    expect(performance.now() - shedAt).toBeLessThan(2_000);
    // B leaving must not have given back A's slot: C still cannot start while A runs.
    const third = await client()
      .chat.completions.create(long)
      .catch((error: unknown) => error);
    expect(third).toBeInstanceOf(OpenAI.RateLimitError);
    expect(await reading).toBeGreaterThan(1);
    // A over: the pool takes the next request at once.
    const after = await client().chat.completions.create({ ...long, max_tokens: 4 });
    expect(after.choices[0]?.message.content?.length ?? 0).toBeGreaterThan(0);
  });
});
