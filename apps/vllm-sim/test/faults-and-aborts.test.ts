import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { postJson, postStream, startTestSim, tokenPrompt, type TestSim } from './start-test-sim';

async function setFaults(url: string, patch: object): Promise<void> {
  const response = await postJson(url, '/sim/faults', patch);
  expect(response.status).toBe(200);
}

async function waitFor(check: () => Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await check()) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error('condition not met in time');
}

describe('vllm-sim faults and client aborts', () => {
  let sim: TestSim;
  beforeAll(async () => {
    sim = await startTestSim({ profile: 'a100-7b', timeScale: 10 });
  });
  beforeEach(() => fetch(`${sim.url}/sim/faults`, { method: 'DELETE' }));
  afterAll(() => sim.close());

  const body = { model: 'test-model', prompt: 'hello there', max_tokens: 3 };

  it('fails every request with the injected status when errorRate is 1, then recovers when cleared', async () => {
    await setFaults(sim.url, { errorRate: 1, errorStatus: 502 });
    const failed = await postJson(sim.url, '/v1/completions', body);
    expect(failed.status).toBe(502);
    expect(failed.json.error.type).toBe('InternalServerError');
    await fetch(`${sim.url}/sim/faults`, { method: 'DELETE' });
    expect((await postJson(sim.url, '/v1/completions', body)).status).toBe(200);
  });

  it('adds latency', async () => {
    await setFaults(sim.url, { extraLatencyMs: 150 });
    const started = performance.now();
    await postJson(sim.url, '/v1/completions', body);
    expect(performance.now() - started).toBeGreaterThanOrEqual(140);
  });

  it('hangs requests until the client gives up', async () => {
    await setFaults(sim.url, { hangRate: 1 });
    const outcome = await fetch(`${sim.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(200),
    }).then(
      () => 'answered',
      (error: Error) => error.name,
    );
    expect(outcome).toBe('TimeoutError');
  });

  it('reports unhealthy on /health when told to', async () => {
    expect((await fetch(`${sim.url}/health`)).status).toBe(200);
    await setFaults(sim.url, { unhealthy: true });
    expect((await fetch(`${sim.url}/health`)).status).toBe(503);
  });

  it('rejects unknown fault settings', async () => {
    const response = await postJson(sim.url, '/sim/faults', { explode: true });
    expect(response.status).toBe(400);
  });

  it('cuts streams after the first token when dropStreamRate is 1', async () => {
    await setFaults(sim.url, { dropStreamRate: 1 });
    const result = await postStream(sim.url, '/v1/completions', { ...body, max_tokens: 50 }).catch(
      (error: Error) => error,
    );
    const events = result instanceof Error ? [] : result.events;
    expect(events.includes('data: [DONE]')).toBe(false);
    await waitFor(async () => sim.sim.engine.runningCount === 0);
  });

  it('refuses connections for a while, then listens again', async () => {
    const response = await postJson(sim.url, '/sim/refuse-connections', { durationMs: 300 });
    expect(response.status).toBe(200);
    await new Promise((resolve) => setTimeout(resolve, 50));
    const refused = await fetch(`${sim.url}/health`).then(
      () => 'connected',
      (error: Error & { cause?: { code?: string } }) => error.cause?.code ?? error.message,
    );
    expect(refused).toBe('ECONNREFUSED');
    await waitFor(async () => (await fetch(`${sim.url}/health`).catch(() => null))?.status === 200);
  });

  it('aborts the sequence and frees its KV blocks when the client disconnects mid-stream', async () => {
    const abortsBefore = sim.sim.engine.stats.requestSuccess.abort;
    const controller = new AbortController();
    const response = await fetch(`${sim.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'test-model', prompt: tokenPrompt(3000, 9), max_tokens: 2000, stream: true }),
      signal: controller.signal,
    });
    const reader = (response.body as ReadableStream<Uint8Array>).getReader();
    await reader.read();
    expect(sim.sim.engine.runningCount).toBe(1);
    expect(sim.sim.engine.pool.usage()).toBeGreaterThan(0);
    controller.abort();
    await waitFor(async () => sim.sim.engine.runningCount === 0 && sim.sim.engine.pool.usage() === 0);
    expect(sim.sim.engine.stats.requestSuccess.abort).toBe(abortsBefore + 1);
  });
});
