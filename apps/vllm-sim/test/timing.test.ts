import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { histogramTotals, median, postStream, startTestSim, tokenPrompt, type TestSim } from './start-test-sim';

/**
 * Acceptance 1 and 2 of the simulator issue, over real HTTP.
 * Reference (simulator-model.md §4, Qwen2.5-7B on A100): 2k-token prompt, idle worker, cold 137 ms,
 * fully cached 14 ms. The ±30 % check is on the engine's own TTFT (what vLLM's TTFT histogram
 * reports, simulated time), medians of several requests; the cold/warm ratio is on wall-clock TTFT seen by the
 * client at --time-scale 1, medians of several requests so one slow timer cannot decide it.
 */
describe('vllm-sim timing, a100-7b, idle', () => {
  let sim: TestSim;
  beforeAll(async () => {
    sim = await startTestSim({ profile: 'a100-7b', timeScale: 1 });
  });
  afterAll(() => sim.close());

  it('serves a 2,000-token prompt ≥ 5× faster warm than cold, both within ±30 % of the reference', async () => {
    const coldWall: number[] = [];
    const warmWall: number[] = [];
    const coldEngine: number[] = [];
    const warmEngine: number[] = [];
    for (let seed = 1; seed <= 3; seed++) {
      const body = { model: 'test-model', prompt: tokenPrompt(2000, seed), max_tokens: 2 };
      let before = await histogramTotals(sim.url, 'vllm:time_to_first_token_seconds');
      const cold = await postStream(sim.url, '/v1/completions', body);
      let after = await histogramTotals(sim.url, 'vllm:time_to_first_token_seconds');
      coldWall.push(cold.ttftMs);
      coldEngine.push((after.sum - before.sum) * 1000);
      for (let repeat = 0; repeat < 2; repeat++) {
        before = after;
        const warm = await postStream(sim.url, '/v1/completions', body);
        after = await histogramTotals(sim.url, 'vllm:time_to_first_token_seconds');
        warmWall.push(warm.ttftMs);
        warmEngine.push((after.sum - before.sum) * 1000);
      }
    }
    // Medians: the simulated clock follows the wall clock, so a request that waits for a busy event
    // loop on a loaded machine (seen: one warm TTFT of 26 ms in a CI run) counts that wait like vLLM would.
    expect(median(coldEngine)).toBeGreaterThan(137 * 0.7);
    expect(median(coldEngine)).toBeLessThan(137 * 1.3);
    expect(median(warmEngine)).toBeGreaterThan(14 * 0.7);
    expect(median(warmEngine)).toBeLessThan(14 * 1.3);
    expect(median(coldWall) / median(warmWall)).toBeGreaterThanOrEqual(5);
  });
});

describe('vllm-sim queueing', () => {
  let sim: TestSim;
  beforeAll(async () => {
    sim = await startTestSim({ profile: 'a100-7b', timeScale: 5 });
  });
  afterAll(() => sim.close());

  it('gives 16 concurrent cold 2k-token prompts a higher median TTFT than one alone', async () => {
    const alone = await postStream(sim.url, '/v1/completions', {
      model: 'test-model',
      prompt: tokenPrompt(2000, 100),
      max_tokens: 4,
    });
    const concurrent = await Promise.all(
      Array.from({ length: 16 }, (_, index) =>
        postStream(sim.url, '/v1/completions', {
          model: 'test-model',
          prompt: tokenPrompt(2000, 200 + index),
          max_tokens: 4,
        }),
      ),
    );
    const concurrentMedian = median(concurrent.map((result) => result.ttftMs));
    expect(concurrent.every((result) => result.status === 200)).toBe(true);
    expect(concurrentMedian).toBeGreaterThan(2 * alone.ttftMs);
  });
});
