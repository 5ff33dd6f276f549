import { afterEach, describe, expect, it } from 'vitest';
import { startTestCluster, totalInflight, waitFor, type TestCluster } from './start-test-cluster';

/** Acceptance 4: backends that refuse are retried elsewhere; hangs time out without a retry; aborts clean up. */
describe('router faults', () => {
  let cluster: TestCluster | undefined;
  afterEach(async () => {
    await cluster?.close();
    cluster = undefined;
  });

  const chatBody = (content: string, extra: object = {}) =>
    JSON.stringify({ model: 'test-model', messages: [{ role: 'user', content }], max_tokens: 4, ...extra });

  async function post(url: string, body: string): Promise<{ status: number; backend: string | null; text: string }> {
    const response = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body,
    });
    return { status: response.status, backend: response.headers.get('x-router-backend'), text: await response.text() };
  }

  async function setFaults(url: string, faults: object): Promise<void> {
    await fetch(`${url}/sim/faults`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(faults),
    });
  }

  it('retries elsewhere when a backend answers 503, with no client error', async () => {
    cluster = await startTestCluster({ backends: 3, router: { policy: 'roundrobin' } });
    const failing = cluster.sims[0] as TestCluster['sims'][number];
    await setFaults(failing.url, { errorRate: 1, errorStatus: 503 });
    for (let i = 0; i < 9; i++) {
      const result = await post(cluster.routerUrl, chatBody(`q${i}`));
      expect(result.status).toBe(200);
      expect(result.backend).not.toBe(failing.id);
    }
    const metrics = await (await fetch(`${cluster.opsUrl}/metrics`)).text();
    expect(metrics).toMatch(
      new RegExp(`kvroute_router_retries_total\\{backend="${failing.id}",cause="status-503"\\} [1-9]`),
    );
    expect(totalInflight(cluster.router)).toBe(0);
  });

  it('retries elsewhere when a backend refuses connections, and opens its circuit', async () => {
    cluster = await startTestCluster({ backends: 2, router: { policy: 'roundrobin', breakerFailureThreshold: 2 } });
    const refusing = cluster.sims[0] as TestCluster['sims'][number];
    await fetch(`${refusing.url}/sim/refuse-connections`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ durationMs: 3000 }),
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    for (let i = 0; i < 6; i++) {
      const result = await post(cluster.routerUrl, chatBody(`r${i}`));
      expect(result.status).toBe(200);
      expect(result.backend).toBe(cluster.sims[1]?.id);
    }
    expect(cluster.registry().get(refusing.id)?.breaker.state).toBe('open');
    expect(totalInflight(cluster.router)).toBe(0);
  });

  it('times out a backend that hangs after taking the request, without re-running it on another one', async () => {
    cluster = await startTestCluster({ backends: 2, router: { policy: 'roundrobin', generationTimeoutMs: 300 } });
    const [hanging, healthy] = cluster.sims as [TestCluster['sims'][number], TestCluster['sims'][number]];
    await setFaults(hanging.url, { hangRate: 1 });
    const results = [await post(cluster.routerUrl, chatBody('h0')), await post(cluster.routerUrl, chatBody('h1'))];
    // Round robin: one request to each. The hung one is answered 504, not sent again to the healthy one.
    expect(results.map((result) => result.status).sort()).toEqual([200, 504]);
    expect(JSON.parse((results.find((result) => result.status === 504) as { text: string }).text).error.code).toBe(
      'ROUTER_ERR_UPSTREAM_TIMEOUT',
    );
    expect(hanging.sim.generationRequestsReceived).toBe(1);
    expect(healthy.sim.generationRequestsReceived).toBe(1);
    expect(totalInflight(cluster.router)).toBe(0);
  });

  it('answers 504 in the OpenAI shape when every backend hangs', async () => {
    cluster = await startTestCluster({ backends: 1, router: { generationTimeoutMs: 200 } });
    await setFaults(cluster.sims[0]?.url as string, { hangRate: 1 });
    const result = await post(cluster.routerUrl, chatBody('all hang'));
    expect(result.status).toBe(504);
    expect(JSON.parse(result.text).error.code).toBe('ROUTER_ERR_UPSTREAM_TIMEOUT');
    expect(totalInflight(cluster.router)).toBe(0);
  });

  it('answers 503 with Retry-After when no backend is usable', async () => {
    cluster = await startTestCluster({
      backends: 1,
      router: { breakerFailureThreshold: 1, breakerCooldownMs: 60_000 },
    });
    await fetch(`${cluster.sims[0]?.url}/sim/refuse-connections`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ durationMs: 3000 }),
    });
    await new Promise((resolve) => setTimeout(resolve, 50));
    const first = await post(cluster.routerUrl, chatBody('x'));
    expect(first.status).toBe(502);
    const response = await fetch(`${cluster.routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: chatBody('y'),
    });
    expect(response.status).toBe(503);
    expect(response.headers.get('retry-after')).toBe('1');
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe('ROUTER_ERR_NO_BACKEND');
    expect((await fetch(`${cluster.routerUrl}/readyz`)).status).toBe(503);
  });

  it('ends a stream with an error event when the backend fails after the first byte', async () => {
    cluster = await startTestCluster({ backends: 1 });
    await setFaults(cluster.sims[0]?.url as string, { dropStreamRate: 1 });
    const result = await post(cluster.routerUrl, chatBody('drop me', { stream: true, max_tokens: 50 }));
    expect(result.status).toBe(200);
    const events = result.text.trim().split('\n\n');
    expect(events.at(-1)).toBe('data: [DONE]');
    expect(JSON.parse((events.at(-2) as string).slice(6)).error.code).toBe('ROUTER_ERR_UPSTREAM_STREAM');
    expect(totalInflight(cluster.router)).toBe(0);
  });

  it('aborts the upstream request at once when the client disconnects, and frees the slot', async () => {
    cluster = await startTestCluster({ backends: 1, sim: { profile: 'a100-7b', timeScale: 1 } });
    const controller = new AbortController();
    const response = await fetch(`${cluster.routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: chatBody('a long answer please', { stream: true, max_tokens: 5000 }),
      signal: controller.signal,
    });
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    const engine = cluster.sims[0]?.sim.engine;
    expect(engine?.runningCount).toBe(1);
    expect(totalInflight(cluster.router)).toBe(1);
    controller.abort();
    await waitFor(() => engine?.runningCount === 0 && totalInflight(cluster?.router as TestCluster['router']) === 0);
    expect(engine?.stats.requestSuccess.abort).toBe(1);
  });

  it('aborts a request still waiting for its first byte when the client gives up', async () => {
    cluster = await startTestCluster({ backends: 1 });
    await setFaults(cluster.sims[0]?.url as string, { hangRate: 1 });
    const outcome = await fetch(`${cluster.routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: chatBody('wait'),
      signal: AbortSignal.timeout(150),
    }).catch((error: Error) => error.name);
    expect(outcome).toBe('TimeoutError');
    await waitFor(() => totalInflight(cluster?.router as TestCluster['router']) === 0);
  });
});
