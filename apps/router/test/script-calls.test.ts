import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { startRedis, type TestRedis } from '@kvroute/testing';
import { Redis } from 'ioredis';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';

/**
 * Issue 15 (cheaper per request): the shared state costs one script call before a request is forwarded
 * (route.lua) and, for a non-streaming response, one after it (release.lua, which also records the
 * ownership that a stream's prefill-done.lua records at its first output); a stream that ends within
 * `prefillDoneMergeMs` of its first token merges its prefill-done into the release too, and so does a non-streaming
 * response that ends within `prefillDoneMergeMs` of its routing (its backlog would be cleared at its estimated end of
 * prefill, never sooner: nonStreamingPrefillDoneFactor). Counted by a
 * private Redis (INFO commandstats) around requests sent one at a time through the official openai client.
 */

let redis: TestRedis;
let admin: Redis;
let sim: SimServer;
let router: RouterServer;
let client: OpenAI;
/** The same router with prefill-done sent at the first token (prefillDoneMergeMs 0). */
let unmergedRouter: RouterServer;
let unmergedClient: OpenAI;

beforeAll(async () => {
  redis = await startRedis({ fresh: true });
  admin = new Redis(redis.url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  await admin.connect();
  sim = await createSimServer(SimConfig.parse({ port: 0, profile: 'fast', model: 'm' }));
  const simUrl = await sim.listen();
  // Calibration off: its batches (one learn call per flush interval) are not per request.
  // A merge window of a second: a 4-token stream on a loaded machine still ends inside it.
  router = await createRouterServer(
    RouterConfig.parse({
      host: '127.0.0.1',
      port: 0,
      opsPort: 0,
      backends: [simUrl],
      redisUrl: redis.url,
      calibrateCostModel: false,
      prefillDoneMergeMs: 1_000,
    }),
  );
  client = new OpenAI({ baseURL: `${await router.listen()}/v1`, apiKey: 'unused', maxRetries: 0 });
  unmergedRouter = await createRouterServer(
    RouterConfig.parse({
      host: '127.0.0.1',
      port: 0,
      opsPort: 0,
      backends: [simUrl],
      redisUrl: redis.url,
      calibrateCostModel: false,
      prefillDoneMergeMs: 0,
    }),
  );
  unmergedClient = new OpenAI({ baseURL: `${await unmergedRouter.listen()}/v1`, apiKey: 'unused', maxRetries: 0 });
});

afterAll(async () => {
  await router?.close();
  await unmergedRouter?.close();
  await sim?.close();
  admin?.disconnect();
  await redis?.stop();
});

/** Script calls (FCALL, EVALSHA, EVAL) the private Redis has served. */
async function scriptCalls(): Promise<number> {
  let calls = 0;
  for (const match of (await admin.info('commandstats')).matchAll(/^cmdstat_(?:fcall|evalsha|eval):calls=(\d+)/gm))
    calls += Number(match[1]);
  return calls;
}

/** Script calls per request for `count` requests sent one after another (each prompt new: nothing to correct). */
async function callsPerRequest(stream: boolean, count: number, tag: string, through: OpenAI = client): Promise<number> {
  const before = await scriptCalls();
  for (let index = 0; index < count; index++) {
    const messages = [
      {
        role: 'user' as const,
        content: `${tag} ${index}: a prompt of its own, long enough for a block or two of routing text`,
      },
    ];
    if (stream) {
      const chunks = await through.chat.completions.create({ model: 'm', messages, max_tokens: 4, stream: true });
      for await (const chunk of chunks) void chunk;
    } else {
      await through.chat.completions.create({ model: 'm', messages, max_tokens: 4 });
    }
  }
  // The release runs as the response ends: give the last one's call a moment to land.
  await new Promise((resolve) => setTimeout(resolve, 100));
  return ((await scriptCalls()) - before) / count;
}

describe('Redis script calls per request', () => {
  it('non-streaming: two (route, release with ownership); a short stream: two as well (prefill-done merged into the release)', async () => {
    // Every script loaded once (a first EVALSHA meets NOSCRIPT and sends EVAL).
    await callsPerRequest(false, 2, 'warm-up');
    await callsPerRequest(true, 2, 'warm-up');
    expect(await callsPerRequest(false, 10, 'json')).toBe(2);
    expect(await callsPerRequest(true, 10, 'sse')).toBe(2);
  });

  it('a stream with prefill-done sent at its first token (prefillDoneMergeMs 0): three (route, prefill-done, release)', async () => {
    await callsPerRequest(true, 2, 'warm-up-unmerged', unmergedClient);
    expect(await callsPerRequest(true, 10, 'sse-unmerged', unmergedClient)).toBe(3);
  });
});
