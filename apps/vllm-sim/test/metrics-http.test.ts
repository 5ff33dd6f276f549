import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postJson, sampleValue, scrapeMetrics, startTestSim, tokenPrompt, type TestSim } from './start-test-sim';

/**
 * Acceptance 4 over HTTP: /metrics parses with a Prometheus text parser, and the prefix-cache counters
 * and KV usage move as the requests predict. (Exact names and labels per dialect are checked beside
 * the renderers, in src/metrics.)
 */
describe('vllm-sim /metrics follows the requests', () => {
  let sim: TestSim;
  beforeAll(async () => {
    sim = await startTestSim({ profile: 'a100-7b', timeScale: 20 });
  });
  afterAll(() => sim.close());

  it('counts queried and hit prompt tokens, and shows KV usage while a long request runs', async () => {
    const prompt = tokenPrompt(2000, 42);
    const before = await scrapeMetrics(sim.url);
    expect(sampleValue(before, 'vllm:prefix_cache_queries_total')).toBe(0);
    await postJson(sim.url, '/v1/completions', { model: 'test-model', prompt, max_tokens: 2 });
    await postJson(sim.url, '/v1/completions', { model: 'test-model', prompt, max_tokens: 2 });
    const after = await scrapeMetrics(sim.url);
    expect(sampleValue(after, 'vllm:prefix_cache_queries_total')).toBe(4000);
    expect(sampleValue(after, 'vllm:prefix_cache_hits_total')).toBe(1984);
    expect(sampleValue(after, 'vllm:prompt_tokens_total')).toBe(4000);
    expect(sampleValue(after, 'vllm:generation_tokens_total')).toBe(4);
    expect(sampleValue(after, 'vllm:kv_cache_usage_perc')).toBe(0);

    const longRequest = postJson(sim.url, '/v1/completions', {
      model: 'test-model',
      prompt: tokenPrompt(6000, 43),
      max_tokens: 400,
    });
    let sawUsage = 0;
    let sawRunning = 0;
    for (let attempt = 0; attempt < 100 && sawUsage === 0; attempt++) {
      await new Promise((resolve) => setTimeout(resolve, 10));
      const during = await scrapeMetrics(sim.url);
      sawUsage = sampleValue(during, 'vllm:kv_cache_usage_perc');
      sawRunning = sampleValue(during, 'vllm:num_requests_running');
    }
    expect(sawUsage).toBeGreaterThan(0);
    expect(sawUsage).toBeLessThan(1);
    expect(sawRunning).toBe(1);
    expect((await longRequest).status).toBe(200);
    const done = await scrapeMetrics(sim.url);
    expect(sampleValue(done, 'vllm:kv_cache_usage_perc')).toBe(0);
    expect(sampleValue(done, 'vllm:num_requests_running')).toBe(0);
  });

  it.each(['vllm-v0', 'sglang', 'llamacpp'] as const)('serves parseable %s metrics', async (dialect) => {
    const other = await startTestSim({ profile: 'fast', metricsDialect: dialect });
    try {
      await postJson(other.url, '/v1/completions', { model: 'test-model', prompt: tokenPrompt(100, 1), max_tokens: 2 });
      const families = await scrapeMetrics(other.url);
      expect(families.size).toBeGreaterThan(3);
      const prefix = dialect === 'vllm-v0' ? 'vllm:' : dialect === 'sglang' ? 'sglang:' : 'llamacpp:';
      for (const name of families.keys()) expect(name.startsWith(prefix)).toBe(true);
    } finally {
      await other.close();
    }
  });
});
