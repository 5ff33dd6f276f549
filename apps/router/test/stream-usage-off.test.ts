import Fastify, { type FastifyInstance } from 'fastify';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { UpstreamKeys } from '@kvroute/platform';
import { DEFAULT_GENERATION_LIMITS } from '@kvroute/protocols';
import type { Backend } from '../src/backends/backend-registry';
import { CircuitBreaker } from '../src/backends/circuit-breaker';
import { NODE_TIMERS } from '../src/one-shot-timers';
import { parseRequest, registerBodyParser } from '../src/pipeline/parse';
import { send } from '../src/pipeline/send';
import { UpstreamPools } from '../src/proxy/upstream-pool';
import { RouterMetrics } from '../src/router-metrics';
import { CHAT, FakeVllm, post, vllmStream } from './fake-vllm-stream';

/**
 * `requestStreamUsage: false`, through the parse and send stages (the request path's stages 2 and 5,
 * composed as pipeline/request-path.ts composes them) over loopback HTTP: the body goes out as the client
 * sent it. The same harness with the option on shows the test can tell the two apart.
 */
describe('requestStreamUsage off', () => {
  let fake: FakeVllm;
  let app: FastifyInstance | undefined;
  const pools = new UpstreamPools({
    connectTimeoutMs: 1_000,
    headersTimeoutMs: 5_000,
    idleTimeoutMs: 5_000,
    keys: UpstreamKeys.none(),
  });
  beforeAll(async () => {
    fake = await new FakeVllm('\n', () => [31, 200]).start();
  });
  afterEach(async () => {
    await app?.close();
    app = undefined;
  });
  afterAll(async () => {
    await pools.close();
    await fake.close();
  });

  async function startStages(requestStreamUsage: boolean): Promise<string> {
    const origin = fake.url;
    const backend: Backend = {
      id: 'fake',
      url: origin,
      origin,
      basePath: '',
      info: { id: 'fake', weight: 1 },
      configuredModels: ['m'],
      breaker: new CircuitBreaker({ failureThreshold: 5, cooldownMs: 1_000, nowMs: () => Date.now() }),
      engineId: 'fake',
      dataParallel: null,
      dataParallelRank: null,
      kvEvents: null,
      role: 'both',
      bootstrapPort: null,
    };
    const metrics = new RouterMetrics();
    const stages = Fastify();
    registerBodyParser(stages, 1024 * 1024, 64);
    stages.post('/v1/chat/completions', async (request, reply) => {
      const parsed = await parseRequest('chat', request, {
        blockSizeBytes: 256,
        maxRoutedBlocks: 64,
        maxJsonDepth: 64,
        limits: DEFAULT_GENERATION_LIMITS,
        requestStreamUsage,
      });
      reply.hijack();
      await send(
        {
          upstreams: pools,
          connectionLostRetryMs: 2_000,
          timers: NODE_TIMERS,
          metrics,
          logger: stages.log,
        },
        {
          backend,
          method: 'POST',
          reason: 'test',
          policyName: 'test',
          model: 'm',
          path: '/v1/chat/completions',
          headers: request.headers,
          clientHop: { peerAddress: request.ip, proto: 'http' },
          body: parsed.body,
          requestId: 'r1',
          arrivedAtMs: performance.now(),
          mayRetryStatus: false,
          deadline: parsed.stream ? { until: 'first-output', ms: 5_000 } : { until: 'end', ms: 5_000 },
          readsUsage: true,
          readsUsageAtStart: false,
          stripsStreamUsage: parsed.stripsStreamUsage,
          showsRoutingHeaders: true,
          extraHeaders: null,
          events: { firstOutput: () => undefined, finished: () => undefined },
        },
        reply.raw,
      );
    });
    app = stages;
    return stages.listen({ host: '127.0.0.1', port: 0 });
  }

  it('forwards a stream body unchanged, and relays the engine bytes as they are', async () => {
    const url = await startStages(false);
    const body = JSON.stringify(CHAT);
    const routed = await post(url, '/v1/chat/completions', body);
    expect(fake.bodies.at(-1)).toBe(body);
    expect(routed.text).toBe(vllmStream('chat', '\n').without);
  });

  it('(the same stages with it on splice the option in and strip the usage again)', async () => {
    const url = await startStages(true);
    const body = JSON.stringify(CHAT);
    const routed = await post(url, '/v1/chat/completions', body);
    expect(fake.bodies.at(-1)).toBe(`{"stream_options":{"include_usage":true},${body.slice(1)}`);
    expect(routed.text).toBe(vllmStream('chat', '\n').without);
  });
});
