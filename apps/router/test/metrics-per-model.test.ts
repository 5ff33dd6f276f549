import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestCluster, totalInflight, waitFor, type TestCluster } from './start-test-cluster';

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

  /** One sample line of the exposition: its series name, labels and value. */
  type Sample = { name: string; labels: Record<string, string>; value: number };
  async function scrape(): Promise<Sample[]> {
    const text = await (await fetch(`${cluster.routerUrl}/metrics`)).text();
    return text
      .split('\n')
      .filter((line) => line !== '' && !line.startsWith('#'))
      .map((line) => {
        const match = /^([\w:]+)(?:\{(.*)\})? (\S+)$/.exec(line);
        const labels: Record<string, string> = {};
        for (const pair of (match?.[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[pair[1] as string] = pair[2] as string;
        return { name: match?.[1] ?? '', labels, value: Number(match?.[3]) };
      });
  }
  const sumWhere = (all: Sample[], name: string, labels: Record<string, string>): number =>
    all.filter((row) => row.name === name && Object.entries(labels).every(([key, value]) => row.labels[key] === value)).reduce((total, row) => total + row.value, 0);

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
    expect(all.some((row) => row.name === 'kvroute_router_request_duration_seconds_bucket' && row.labels['le'] === '1800')).toBe(true);

    const tokens = 'kvroute_router_tokens_total';
    const bPrompt = (whole.usage?.prompt_tokens ?? 0) + (again.usage?.prompt_tokens ?? 0);
    expect(sumWhere(all, tokens, { model: 'model-b', kind: 'prompt' })).toBe(bPrompt);
    expect(sumWhere(all, tokens, { model: 'model-b', kind: 'generated' })).toBe(14);
    // The second identical prompt found the first's prefix in the engine's cache.
    const bCached = (whole.usage?.prompt_tokens_details?.cached_tokens ?? 0) + (again.usage?.prompt_tokens_details?.cached_tokens ?? 0);
    expect(bCached).toBeGreaterThan(0);
    expect(sumWhere(all, tokens, { model: 'model-b', kind: 'cached' })).toBe(bCached);
    // The stream's usage was asked for on the client's behalf (requestStreamUsage) and counted.
    expect(sumWhere(all, tokens, { model: 'model-a', kind: 'generated' })).toBe(5);
  });

  it('names its build in kvroute_build_info, /version and --version alike', async () => {
    const version = (await (await fetch(`${cluster.routerUrl}/version`)).json()) as { version: string; commit: string };
    expect(version.version).toMatch(/^\d+\.\d+\.\d+/);
    const info = (await scrape()).filter((row) => row.name === 'kvroute_build_info');
    expect(info).toEqual([{ name: 'kvroute_build_info', labels: { version: version.version, commit: version.commit }, value: 1 }]);
  });
});
