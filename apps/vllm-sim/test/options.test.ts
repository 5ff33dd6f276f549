import { describe, expect, it } from 'vitest';
import { postJson, startTestSim, tokenPrompt } from './start-test-sim';

async function withSim<T>(overrides: Parameters<typeof startTestSim>[0], run: (url: string) => Promise<T>): Promise<T> {
  const sim = await startTestSim({ profile: 'fast', ...overrides });
  try {
    return await run(sim.url);
  } finally {
    await sim.close();
  }
}

describe('vllm-sim options', () => {
  const body = { model: 'test-model', prompt: tokenPrompt(100, 5), max_tokens: 3 };

  it('omits prompt_tokens_details on a miss by default, and reports the hit on a repeat', async () => {
    await withSim({}, async (url) => {
      expect((await postJson(url, '/v1/completions', body)).json.usage.prompt_tokens_details).toBeNull();
      expect((await postJson(url, '/v1/completions', body)).json.usage.prompt_tokens_details).toEqual({
        cached_tokens: 96,
      });
    });
  });

  it('--always-include-cached-tokens reports cached_tokens: 0 on a miss', async () => {
    await withSim({ alwaysIncludeCachedTokens: true }, async (url) => {
      expect((await postJson(url, '/v1/completions', body)).json.usage.prompt_tokens_details).toEqual({
        cached_tokens: 0,
      });
    });
  });

  it('--no-prompt-tokens-details never reports cached tokens', async () => {
    await withSim({ promptTokensDetails: false }, async (url) => {
      await postJson(url, '/v1/completions', body);
      expect((await postJson(url, '/v1/completions', body)).json.usage.prompt_tokens_details).toBeNull();
    });
  });

  it('--eos-random ends early with finish_reason stop, unless ignore_eos', async () => {
    await withSim({ eosRandom: true, seed: 3 }, async (url) => {
      const reasons = new Set<string>();
      const lengths: number[] = [];
      for (let seed = 0; seed < 20; seed++) {
        const response = await postJson(url, '/v1/completions', {
          model: 'test-model',
          prompt: tokenPrompt(20, seed),
          max_tokens: 40,
        });
        reasons.add(response.json.choices[0].finish_reason);
        lengths.push(response.json.usage.completion_tokens);
      }
      expect(reasons.has('stop')).toBe(true);
      expect(Math.min(...lengths)).toBeLessThan(40);
      expect(Math.max(...lengths)).toBeLessThanOrEqual(40);
      const ignored = await postJson(url, '/v1/completions', {
        model: 'test-model',
        prompt: tokenPrompt(20, 1),
        max_tokens: 40,
        ignore_eos: true,
      });
      expect(ignored.json.usage.completion_tokens).toBe(40);
      expect(ignored.json.choices[0].finish_reason).toBe('length');
    });
  });

  it('gives the same output for the same prompt (deterministic, like greedy decoding)', async () => {
    await withSim({ seed: 9 }, async (url) => {
      const first = await postJson(url, '/v1/completions', body);
      const second = await postJson(url, '/v1/completions', body);
      expect(second.json.choices[0].text).toBe(first.json.choices[0].text);
    });
  });

  it('serves /slots and /props in the llama.cpp dialect, with llama.cpp health', async () => {
    await withSim({ metricsDialect: 'llamacpp', slots: 3 }, async (url) => {
      const slots = (await (await fetch(`${url}/slots`)).json()) as Array<{ id: number; is_processing: boolean }>;
      expect(slots.map((slot) => slot.id)).toEqual([0, 1, 2]);
      expect(slots.every((slot) => slot.is_processing === false)).toBe(true);
      const props = (await (await fetch(`${url}/props`)).json()) as { total_slots: number };
      expect(props.total_slots).toBe(3);
      expect(await (await fetch(`${url}/health`)).json()).toEqual({ status: 'ok' });
    });
  });

  it('reports its engine version per dialect', async () => {
    await withSim({ metricsDialect: 'vllm-v0' }, async (url) => {
      expect(await (await fetch(`${url}/version`)).json()).toEqual({ version: '0.6.4.post1' });
    });
  });
});
