import { findFreePort } from '@kvroute/testing';
import OpenAI, { APIError } from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { startTestCluster, totalInflight, waitFor, type TestCluster } from './start-test-cluster';

/**
 * A request a backend has taken runs there once: a long generation is not cut by a time-to-headers
 * timeout and re-run on other backends (up to ~15 GPU-minutes for a 5-minute answer before this), a
 * stream whose first byte never comes is answered with the router's timeout and not re-sent, and only a
 * request that never reached a backend (connection refused) is tried on another one.
 */

/**
 * Simulated time runs this many times faster than wall time, and the router's timeouts are its
 * defaults divided by the same factor: the router sees the backends as it would at full scale.
 */
const TIME_SCALE = 200;
/** The router's defaults (config.ts), scaled: 300 s to a stream's first byte, 30 min for a whole generation. */
const SCALED_TIMEOUTS = { streamFirstByteTimeoutMs: 300_000 / TIME_SCALE, generationTimeoutMs: 1_800_000 / TIME_SCALE };

const received = (cluster: TestCluster) => cluster.sims.map((sim) => sim.sim.generationRequestsReceived);
const sum = (values: readonly number[]) => values.reduce((total, value) => total + value, 0);

describe('upstream timeouts', () => {
  let cluster: TestCluster | undefined;
  afterEach(async () => {
    await cluster?.close();
    cluster = undefined;
  });

  it('completes a 10-minute non-streaming generation once, on one backend', async () => {
    // a100-70b-tp4 decodes one sequence at ~31 ms a token: 20,000 tokens are ~10.5 simulated minutes,
    // ~3 s of wall time at this scale. The old 300 s headers timeout (1.5 s here) cut it and re-ran it.
    cluster = await startTestCluster({
      sims: [{}, {}, {}],
      sim: { profile: 'a100-70b-tp4', timeScale: TIME_SCALE, maxModelLen: 32_768 },
      router: { policy: 'leastloaded', ...SCALED_TIMEOUTS },
    });
    const client = new OpenAI({ baseURL: `${cluster.routerUrl}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });

    const completion = await client.chat.completions.create({
      model: 'test-model',
      messages: [{ role: 'user', content: 'write a very long story' }],
      max_tokens: 20_000,
    });

    expect(completion.usage?.completion_tokens).toBe(20_000);
    expect(completion.choices[0]?.finish_reason).toBe('length');
    // One request reached one backend, once.
    expect(sum(received(cluster))).toBe(1);
    const servedBy = cluster.sims.find((sim) => sim.sim.generationRequestsReceived === 1);
    // It ran for over 10 simulated minutes there (the engine's own end-to-end figure, simulated seconds).
    expect(servedBy?.sim.engine.stats.e2eSeconds.sum).toBeGreaterThan(600);
    expect(servedBy?.sim.engine.stats.requestSuccess.length).toBe(1);
    expect(totalInflight(cluster.router)).toBe(0);
  });

  it('answers 504 to a stream whose backend took it and never answered, without sending it to another backend', async () => {
    cluster = await startTestCluster({ backends: 2, router: { policy: 'roundrobin', streamFirstByteTimeoutMs: 300 } });
    for (const sim of cluster.sims) sim.sim.faults.update({ hangRate: 1 });
    // No retries by the client either: what is counted is what the router sends.
    const client = new OpenAI({ baseURL: `${cluster.routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });

    const failure = await client.chat.completions
      .create({ model: 'test-model', messages: [{ role: 'user', content: 'hello' }], max_tokens: 4, stream: true })
      .then(
        () => null,
        (error: unknown) => error,
      );

    expect(failure).toBeInstanceOf(APIError);
    expect((failure as APIError).status).toBe(504);
    expect((failure as APIError).code).toBe('ROUTER_ERR_UPSTREAM_TIMEOUT');
    expect((failure as APIError).error).toMatchObject({ type: 'upstream_error', param: null });
    expect(sum(received(cluster))).toBe(1);
    expect(totalInflight(cluster.router)).toBe(0);
  });

  it('ends a stream whose first token does not come in time with the timeout error event, aborting it upstream, not retrying', async () => {
    // Headers at once (as vLLM sends them), then a prefill far longer than the first-byte timeout: a
    // 24k-token prompt on a 70B at full time scale takes seconds.
    cluster = await startTestCluster({
      backends: 2,
      sim: { profile: 'a100-70b-tp4', timeScale: 1, maxModelLen: 32_768 },
      router: { policy: 'roundrobin', streamFirstByteTimeoutMs: 300 },
    });
    const client = new OpenAI({ baseURL: `${cluster.routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    const longPrompt = Array.from({ length: 12_000 }, (_, index) => `w${index % 97}`).join(' ');

    const stream = await client.chat.completions.create({
      model: 'test-model',
      messages: [{ role: 'user', content: longPrompt }],
      max_tokens: 4,
      stream: true,
    });
    const failure = await (async () => {
      for await (const _chunk of stream) {
        // No output is expected before the timeout.
      }
      return null;
    })().catch((error: unknown) => error);

    expect(failure).toBeInstanceOf(APIError);
    expect((failure as APIError).code).toBe('ROUTER_ERR_UPSTREAM_TIMEOUT');
    expect(sum(received(cluster))).toBe(1);
    // The engine was told: the request was aborted there, not left computing.
    await waitFor(
      () =>
        cluster?.sims.every((sim) => sim.sim.engine.runningCount === 0 && sim.sim.engine.waitingCount === 0) === true,
      5_000,
    );
    expect(sum(cluster.sims.map((sim) => sim.sim.engine.stats.requestSuccess.abort))).toBe(1);
    expect(totalInflight(cluster.router)).toBe(0);
  });

  it('answers 504 to a non-streaming generation past its deadline, aborting it upstream, not retrying', async () => {
    cluster = await startTestCluster({
      backends: 2,
      sim: { profile: 'a100-70b-tp4', timeScale: 1 },
      router: { policy: 'roundrobin', generationTimeoutMs: 300 },
    });
    const client = new OpenAI({ baseURL: `${cluster.routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });

    // ~2,000 tokens at ~31 ms: about a minute of generation, far past 300 ms.
    const failure = await client.chat.completions
      .create({ model: 'test-model', messages: [{ role: 'user', content: 'hello' }], max_tokens: 2_000 })
      .then(
        () => null,
        (error: unknown) => error,
      );

    expect((failure as APIError).status).toBe(504);
    expect((failure as APIError).code).toBe('ROUTER_ERR_UPSTREAM_TIMEOUT');
    expect(sum(received(cluster))).toBe(1);
    await waitFor(() => cluster?.sims.every((sim) => sim.sim.engine.runningCount === 0) === true, 5_000);
    expect(sum(cluster.sims.map((sim) => sim.sim.engine.stats.requestSuccess.abort))).toBe(1);
    expect(totalInflight(cluster.router)).toBe(0);
  });

  it('still tries another backend when one cannot be connected to', async () => {
    const closedPort = await findFreePort();
    cluster = await startTestCluster({ backends: 1, router: { policy: 'roundrobin', breakerFailureThreshold: 100 } });
    const live = cluster.sims[0] as TestCluster['sims'][number];
    // A second backend where nothing listens, with its models configured (nothing to discover).
    cluster
      .registry()
      .add({ url: `http://127.0.0.1:${closedPort}`, id: 'refusing', models: ['test-model'], weight: 1 });
    const client = new OpenAI({ baseURL: `${cluster.routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });

    for (let index = 0; index < 4; index++) {
      const { response } = await client.chat.completions
        .create({ model: 'test-model', messages: [{ role: 'user', content: `q${index}` }], max_tokens: 4 })
        .withResponse();
      expect(response.headers.get('x-router-backend')).toBe(live.id);
    }

    expect(live.sim.generationRequestsReceived).toBe(4);
    const metrics = await (await fetch(`${cluster.opsUrl}/metrics`)).text();
    expect(metrics).toMatch(/kvroute_router_retries_total\{backend="refusing",cause="connect"\} [1-9]/);
    expect(totalInflight(cluster.router)).toBe(0);
  });
});
