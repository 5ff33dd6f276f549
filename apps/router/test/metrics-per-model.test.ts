import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scrapeAt, sumWhere } from './metrics-scrape';
import { startTestCluster, TEST_ADMIN_TOKEN, totalInflight, waitFor, type TestCluster } from './start-test-cluster';

/**
 * Issue 16, acceptance 4 (router side): a fleet serving two models tells them apart in the router's
 * metrics, the TTFT histogram counts streams only, token counters follow usage, and the build is named.
 */
describe('router metrics per model, 2 models on 2 vllm-sim backends', () => {
  let cluster: TestCluster;
  let client: OpenAI;
  beforeAll(async () => {
    cluster = await startTestCluster({ sims: [{ model: 'model-a' }, { model: 'model-b' }], sim: { seed: 3 } });
    client = new OpenAI({ baseURL: `${cluster.routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  afterAll(() => cluster.close());

  const scrape = () => scrapeAt(cluster.opsUrl);

  it('labels requests, TTFT and duration by model; TTFT counts only streams; tokens follow usage', async () => {
    const messages = [{ role: 'user' as const, content: 'Name three colours, and then three more.' }];
    const stream = await client.chat.completions.create({ model: 'model-a', messages, max_tokens: 5, stream: true });
    for await (const _chunk of stream) {
      // drained
    }
    const whole = await client.chat.completions.create({ model: 'model-b', messages, max_tokens: 7 });
    const again = await client.chat.completions.create({ model: 'model-b', messages, max_tokens: 7 });
    await waitFor(() => totalInflight(cluster.router) === 0);

    const all = await scrape();
    const requests = 'kvroute_router_requests_total';
    expect(sumWhere(all, requests, { model: 'model-a', status: '200' })).toBe(1);
    expect(sumWhere(all, requests, { model: 'model-b', status: '200' })).toBe(2);
    const ttftCount = 'kvroute_router_time_to_first_token_seconds_count';
    expect(sumWhere(all, ttftCount, { model: 'model-a' })).toBe(1);
    expect(sumWhere(all, ttftCount, { model: 'model-b' })).toBe(0);
    const durationCount = 'kvroute_router_request_duration_seconds_count';
    expect(sumWhere(all, durationCount, { model: 'model-a', stream: 'true' })).toBe(1);
    expect(sumWhere(all, durationCount, { model: 'model-b', stream: 'false' })).toBe(2);
    // Whole requests up to 30 minutes fall in a bucket of their own.
    expect(
      all.some((row) => row.name === 'kvroute_router_request_duration_seconds_bucket' && row.labels['le'] === '1800'),
    ).toBe(true);

    const tokens = 'kvroute_router_tokens_total';
    const bPrompt = (whole.usage?.prompt_tokens ?? 0) + (again.usage?.prompt_tokens ?? 0);
    expect(sumWhere(all, tokens, { model: 'model-b', kind: 'prompt' })).toBe(bPrompt);
    expect(sumWhere(all, tokens, { model: 'model-b', kind: 'generated' })).toBe(14);
    // The second identical prompt found the first's prefix in the engine's cache.
    const bCached =
      (whole.usage?.prompt_tokens_details?.cached_tokens ?? 0) +
      (again.usage?.prompt_tokens_details?.cached_tokens ?? 0);
    expect(bCached).toBeGreaterThan(0);
    expect(sumWhere(all, tokens, { model: 'model-b', kind: 'cached' })).toBe(bCached);
    // The stream's usage was asked for on the client's behalf (requestStreamUsage) and counted.
    expect(sumWhere(all, tokens, { model: 'model-a', kind: 'generated' })).toBe(5);
  });

  it('names its build in kvroute_build_info, /version and --version alike', async () => {
    const version = (await (await fetch(`${cluster.routerUrl}/version`)).json()) as { version: string; commit: string };
    expect(version.version).toMatch(/^\d+\.\d+\.\d+/);
    const info = (await scrape()).filter((row) => row.name === 'kvroute_build_info');
    expect(info).toEqual([
      { name: 'kvroute_build_info', labels: { version: version.version, commit: version.commit }, value: 1 },
    ]);
  });
});

/**
 * With discovery every pod is a backend id of its own (`name@IP:port`): a departed backend's series must
 * go from /metrics, else the exposition grows with every pod ever seen.
 */
describe('router metrics of a removed backend', () => {
  let cluster: TestCluster;
  beforeAll(async () => {
    cluster = await startTestCluster({ backends: 2, router: { adminToken: TEST_ADMIN_TOKEN } });
  });
  afterAll(() => cluster.close());

  const admin = (method: string, path: string, body?: unknown) =>
    fetch(`${cluster.adminUrl}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${TEST_ADMIN_TOKEN}`,
        ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  const chat = async (content: string) => {
    const response = await fetch(`${cluster.routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: 'test-model',
        messages: [{ role: 'user', content }],
        max_tokens: 3,
        stream: true,
        stream_options: { include_usage: true },
      }),
    });
    await response.text();
    return response.status;
  };
  /** One request served by `id` alone (the other drained meanwhile). */
  const servedBy = async (id: string, other: string) => {
    expect((await admin('POST', `/admin/backends/${encodeURIComponent(other)}/drain`)).status).toBe(200);
    expect(await chat(`for ${id}`)).toBe(200);
    expect((await admin('POST', `/admin/backends/${encodeURIComponent(other)}/undrain`)).status).toBe(200);
  };
  const seriesOf = async (id: string) =>
    (await scrapeAt(cluster.opsUrl)).filter((row) => row.labels['backend'] === id).map((row) => row.name);

  it('removes every series labelled with the backend once it is deleted, and starts a returning id from zero', async () => {
    const [gone, stays] = cluster.sims as TestCluster['sims'] &
      readonly [TestCluster['sims'][number], TestCluster['sims'][number]];
    await servedBy(gone.id, stays.id);
    await servedBy(stays.id, gone.id);
    await waitFor(() => totalInflight(cluster.router) === 0);
    const before = await seriesOf(gone.id);
    // Per-request series of several metrics (single- and multi-label, counters and histograms).
    expect(before).toEqual(
      expect.arrayContaining([
        'kvroute_router_requests_total',
        'kvroute_router_tokens_total',
        'kvroute_router_request_duration_seconds_count',
        'kvroute_router_time_to_first_token_seconds_bucket',
      ]),
    );
    const staysBefore = await seriesOf(stays.id);

    expect((await admin('DELETE', `/admin/backends/${encodeURIComponent(gone.id)}`)).status).toBe(200);
    await waitFor(async () => (await seriesOf(gone.id)).length === 0);
    // The other backend's series stay.
    expect(await seriesOf(stays.id)).toEqual(staysBefore);

    // The same id added again counts from zero (no stale cached series: a stale one would not show at all).
    expect((await admin('POST', '/admin/backends', { url: gone.url, models: ['test-model'] })).status).toBe(201);
    await servedBy(gone.id, stays.id);
    const after = await scrapeAt(cluster.opsUrl);
    expect(
      after
        .filter((row) => row.name === 'kvroute_router_requests_total' && row.labels['backend'] === gone.id)
        .map((row) => row.value),
    ).toEqual([1]);
  });
});
