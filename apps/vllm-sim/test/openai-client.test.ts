import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postStream, startTestSim, tokenPrompt, type TestSim } from './start-test-sim';

/** Acceptance 5: the official `openai` client works unchanged; SSE framing is vLLM's. */
describe('vllm-sim with the official openai client', () => {
  let sim: TestSim;
  let client: OpenAI;
  beforeAll(async () => {
    sim = await startTestSim({ profile: 'fast', timeScale: 1 });
    client = new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  afterAll(() => sim.close());

  it('lists the served model', async () => {
    const models = await client.models.list();
    expect(models.data.map((model) => model.id)).toEqual(['test-model']);
  });

  it('answers a non-streaming chat completion with exactly max_tokens tokens', async () => {
    const completion = await client.chat.completions.create({
      model: 'test-model',
      messages: [{ role: 'user', content: 'hello' }],
      max_tokens: 7,
    });
    expect(completion.object).toBe('chat.completion');
    expect(completion.choices[0]?.message.role).toBe('assistant');
    expect(completion.choices[0]?.finish_reason).toBe('length');
    expect(completion.usage?.completion_tokens).toBe(7);
    expect(completion.choices[0]?.message.content?.trim().split(' ')).toHaveLength(7);
  });

  it('streams a chat completion with usage', async () => {
    const stream = await client.chat.completions.create({
      model: 'test-model',
      messages: [{ role: 'user', content: 'stream please' }],
      max_tokens: 5,
      stream: true,
      stream_options: { include_usage: true },
    });
    const deltas: string[] = [];
    let finish: string | null = null;
    let usage: OpenAI.Completions.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      for (const choice of chunk.choices) {
        if (choice.delta.content) deltas.push(choice.delta.content);
        if (choice.finish_reason) finish = choice.finish_reason;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(deltas).toHaveLength(5);
    expect(finish).toBe('length');
    expect(usage?.completion_tokens).toBe(5);
  });

  it('answers text completions for a string, a batch of strings and token ids, streaming and not', async () => {
    const single = await client.completions.create({ model: 'test-model', prompt: 'once upon a time', max_tokens: 3 });
    expect(single.choices).toHaveLength(1);
    expect(single.usage?.completion_tokens).toBe(3);
    const batch = await client.completions.create({ model: 'test-model', prompt: ['first', 'second'], max_tokens: 2 });
    expect(batch.choices.map((choice) => choice.index)).toEqual([0, 1]);
    expect(batch.usage?.completion_tokens).toBe(4);
    const ids = await client.completions.create({ model: 'test-model', prompt: tokenPrompt(40, 1), max_tokens: 2 });
    expect(ids.usage?.prompt_tokens).toBe(40);
    const stream = await client.completions.create({
      model: 'test-model',
      prompt: 'stream me',
      max_tokens: 4,
      stream: true,
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
    expect(text.trim().split(' ')).toHaveLength(4);
  });

  it('frames chat SSE as vLLM does: role chunk, content deltas, finish chunk, usage chunk, [DONE]', async () => {
    const result = await postStream(sim.url, '/v1/chat/completions', {
      model: 'test-model',
      messages: [{ role: 'user', content: 'frame check' }],
      max_tokens: 3,
      stream_options: { include_usage: true },
    });
    expect(result.status).toBe(200);
    expect(result.events.every((event) => event.startsWith('data: ') && !event.includes('\nevent:'))).toBe(true);
    expect(result.events.at(-1)).toBe('data: [DONE]');
    const chunks = result.events.slice(0, -1).map((event) => JSON.parse(event.slice(6)));
    expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
    const contentChunks = chunks.slice(1, -1);
    expect(contentChunks).toHaveLength(3);
    expect(contentChunks.slice(0, -1).every((chunk) => chunk.choices[0].finish_reason === null)).toBe(true);
    expect(contentChunks.at(-1).choices[0].finish_reason).toBe('length');
    const usageChunk = chunks.at(-1);
    expect(usageChunk.choices).toEqual([]);
    expect(usageChunk.usage).toMatchObject({ prompt_tokens: expect.any(Number), completion_tokens: 3 });
    for (const chunk of chunks) {
      expect(chunk.object).toBe('chat.completion.chunk');
      expect(chunk.id).toBe(chunks[0].id);
    }
  });
});
