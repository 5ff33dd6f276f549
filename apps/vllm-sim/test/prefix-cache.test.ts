import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postJson, startTestSim, type TestSim } from './start-test-sim';

type Message = OpenAI.Chat.Completions.ChatCompletionMessageParam;

/** cached_tokens as the official client sees it (absent on a miss, as in vLLM). */
function cachedTokens(usage: OpenAI.Completions.CompletionUsage | undefined): number {
  return usage?.prompt_tokens_details?.cached_tokens ?? 0;
}

describe('vllm-sim prefix cache through the OpenAI API', () => {
  let sim: TestSim;
  let client: OpenAI;
  // 400 blocks = 6,400 tokens of KV: a conversation fits, five other long prompts push it out.
  beforeAll(async () => {
    sim = await startTestSim({ profile: 'a100-7b', timeScale: 50, numGpuBlocks: 401 });
    client = new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  afterAll(() => sim.close());

  const systemPrompt = 'You are a careful assistant for a routing team. '.repeat(40);

  async function ask(
    messages: Message[],
  ): Promise<{ answer: string; prompt: number; cached: number; predicted: number }> {
    const oracle = await postJson(sim.url, '/sim/match', { model: 'test-model', messages });
    const completion = await client.chat.completions.create({ model: 'test-model', messages, max_tokens: 24 });
    return {
      answer: completion.choices[0]?.message.content ?? '',
      prompt: completion.usage?.prompt_tokens ?? 0,
      cached: cachedTokens(completion.usage),
      predicted: oracle.json.cached_tokens,
    };
  }

  it('gives the turns of one conversation growing hits, each equal to the oracle and to whole blocks', async () => {
    const messages: Message[] = [{ role: 'system', content: systemPrompt }];
    const hits: number[] = [];
    for (let turn = 1; turn <= 8; turn++) {
      messages.push({
        role: 'user',
        content: `turn ${turn}: tell me about prefix number ${turn * 7919} and its cache.`,
      });
      const result = await ask(messages);
      messages.push({ role: 'assistant', content: result.answer });
      expect(result.cached).toBe(result.predicted);
      expect(result.cached % 16).toBe(0);
      expect(result.cached).toBeLessThanOrEqual(Math.floor((result.prompt - 1) / 16) * 16);
      hits.push(result.cached);
    }
    expect(hits[0]).toBe(0);
    for (let turn = 1; turn < hits.length; turn++) expect(hits[turn]).toBeGreaterThan(hits[turn - 1] as number);
    // The generated answer re-tokenizes to the generated ids, so turn 8 reuses nearly everything.
    const last = await ask(messages.slice(0, -1));
    expect(last.cached).toBe(Math.floor((last.prompt - 1) / 16) * 16);
  });

  it('reports cached_tokens for an exact repeat as floor((n − 1) / 16) · 16', async () => {
    const messages: Message[] = [{ role: 'user', content: 'a fresh question about the weather '.repeat(30) }];
    const first = await ask(messages);
    const second = await ask(messages);
    expect(first.cached).toBe(0);
    expect(second.cached).toBe(Math.floor((second.prompt - 1) / 16) * 16);
  });

  it('evicts the least recently used conversation when other prompts fill the cache, which then misses', async () => {
    const conversation: Message[] = [
      { role: 'system', content: systemPrompt },
      { role: 'user', content: 'remember me' },
    ];
    await ask(conversation);
    expect((await ask(conversation)).cached).toBeGreaterThan(0);
    for (let other = 0; other < 8; other++) {
      await ask([
        { role: 'user', content: `unrelated document ${other}: ${'lorem ipsum dolor sit amet '.repeat(200)}` },
      ]);
    }
    const state = (await (await fetch(`${sim.url}/sim/state`)).json()) as { evicted_blocks: number };
    expect(state.evicted_blocks).toBeGreaterThan(0);
    const afterEviction = await ask(conversation);
    expect(afterEviction.predicted).toBe(0);
    expect(afterEviction.cached).toBe(0);
  });
});
