import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestSim, type TestSim } from './start-test-sim';

/** The Responses API as vLLM serves it, through the official openai client. */
describe('vllm-sim /v1/responses', () => {
  let sim: TestSim;
  let client: OpenAI;
  beforeAll(async () => {
    sim = await startTestSim({ profile: 'fast', timeScale: 1, maxStoredResponses: 3 });
    client = new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  afterAll(() => sim.close());

  const instructions = 'You are a terse assistant. '.repeat(40);

  it('answers, stores, and continues a chain: the follow-up hits the prefix cache of the whole conversation', async () => {
    const first = await client.responses.create({
      model: 'test-model',
      instructions,
      input: 'What is the capital of France? '.repeat(10),
      max_output_tokens: 8,
    });
    expect(first.id).toMatch(/^resp_[0-9a-f]{32}$/);
    expect(first.object).toBe('response');
    expect(first.output_text.trim().split(' ')).toHaveLength(8);
    expect(first.usage?.output_tokens).toBe(8);
    const firstInput = first.usage?.input_tokens ?? 0;

    const second = await client.responses.create({
      model: 'test-model',
      instructions,
      previous_response_id: first.id,
      input: 'And of Germany?',
      max_output_tokens: 8,
    });
    expect(second.previous_response_id).toBe(first.id);
    // The prompt holds the first turn's input and answer: longer than the first, and cached up to its answer.
    expect(second.usage?.input_tokens).toBeGreaterThan(firstInput + 8);
    expect(second.usage?.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(
      Math.floor((firstInput - 16) / 16) * 16,
    );

    const fetched = await client.responses.retrieve(first.id);
    expect(fetched.id).toBe(first.id);
    expect(fetched.output_text).toBe(first.output_text);
  });

  it('answers 404 in the OpenAI error shape for an unknown previous_response_id, and for GET and DELETE', async () => {
    const unknown = 'resp_00000000000000000000000000000000';
    await expect(
      client.responses.create({ model: 'test-model', previous_response_id: unknown, input: 'hi' }),
    ).rejects.toMatchObject({ status: 404, error: { type: 'invalid_request_error', param: 'previous_response_id' } });
    await expect(client.responses.retrieve(unknown)).rejects.toMatchObject({ status: 404 });
    const response = await fetch(`${sim.url}/v1/responses/${unknown}`, { method: 'DELETE' });
    expect(response.status).toBe(404);
  });

  it('does not store with store: false, and forgets a deleted response', async () => {
    const unstored = await client.responses.create({
      model: 'test-model',
      input: 'ephemeral',
      store: false,
      max_output_tokens: 2,
    });
    await expect(client.responses.retrieve(unstored.id)).rejects.toMatchObject({ status: 404 });
    const stored = await client.responses.create({ model: 'test-model', input: 'keep me', max_output_tokens: 2 });
    await client.responses.delete(stored.id);
    await expect(client.responses.retrieve(stored.id)).rejects.toMatchObject({ status: 404 });
  });

  it('keeps at most maxStoredResponses: the oldest goes first', async () => {
    const ids: string[] = [];
    for (let index = 0; index < 4; index++)
      ids.push(
        (await client.responses.create({ model: 'test-model', input: `turn ${index}`, max_output_tokens: 1 })).id,
      );
    await expect(client.responses.retrieve(ids[0] as string)).rejects.toMatchObject({ status: 404 });
    expect((await client.responses.retrieve(ids[3] as string)).id).toBe(ids[3]);
  });

  it('streams the events OpenAI sends, in order, ending with response.completed and its usage', async () => {
    const stream = client.responses.stream({ model: 'test-model', input: 'stream please', max_output_tokens: 5 });
    const types: string[] = [];
    let deltas = '';
    for await (const event of stream) {
      types.push(event.type);
      if (event.type === 'response.output_text.delta') deltas += event.delta;
    }
    const final = await stream.finalResponse();
    expect(types.slice(0, 4)).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
    ]);
    expect(types.filter((type) => type === 'response.output_text.delta')).toHaveLength(5);
    expect(types.slice(-4)).toEqual([
      'response.output_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.completed',
    ]);
    expect(final.output_text).toBe(deltas);
    expect(final.usage?.output_tokens).toBe(5);
    // Stored once complete: the id from response.created resolves.
    expect((await client.responses.retrieve(final.id)).output_text).toBe(deltas);
  });
});
