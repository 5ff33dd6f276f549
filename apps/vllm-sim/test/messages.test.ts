import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestSim, type TestSim } from './start-test-sim';

/** `POST /v1/messages`: Anthropic's framing, the chat prefix cache, and usage in both reporting modes. */
interface SseEvent {
  readonly event: string;
  readonly data: Record<string, unknown>;
}

async function streamMessages(url: string, body: object): Promise<SseEvent[]> {
  const response = await fetch(`${url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ ...body, stream: true }),
  });
  expect(response.headers.get('content-type')).toContain('text/event-stream');
  const text = await response.text();
  return text
    .split('\n\n')
    .filter((block) => block.trim() !== '')
    .map((block) => {
      const lines = block.split('\n');
      const event = (lines.find((line) => line.startsWith('event: ')) ?? '').slice(7);
      const data = JSON.parse((lines.find((line) => line.startsWith('data: ')) ?? '').slice(6)) as Record<
        string,
        unknown
      >;
      return { event, data };
    });
}

const SYSTEM = `You are a careful assistant. ${'Keep answers short. '.repeat(60)}`;

describe('vllm-sim Anthropic Messages', () => {
  let sim: TestSim;
  let vllmLike: TestSim;
  beforeAll(async () => {
    sim = await startTestSim({ promptTokensDetails: true });
    vllmLike = await startTestSim({ promptTokensDetails: false });
  });
  afterAll(async () => {
    await sim.close();
    await vllmLike.close();
  });

  it("streams Anthropic's events in order, the event name repeated in data.type, the text equal to the non-streamed answer", async () => {
    const body = {
      model: 'test-model',
      max_tokens: 5,
      system: SYSTEM,
      messages: [{ role: 'user', content: 'Hello!' }],
    };
    const events = await streamMessages(sim.url, body);
    const names = events.map((event) => event.event);
    expect(names.slice(0, 2)).toEqual(['message_start', 'content_block_start']);
    expect(names.slice(-3)).toEqual(['content_block_stop', 'message_delta', 'message_stop']);
    expect(names.filter((name) => name === 'content_block_delta')).toHaveLength(5);
    for (const event of events) expect(event.data.type).toBe(event.event);
    const streamedText = events
      .filter((event) => event.event === 'content_block_delta')
      .map((event) => (event.data.delta as { text: string }).text)
      .join('');
    const whole = (await (
      await fetch(`${sim.url}/v1/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      })
    ).json()) as { type: string; content: Array<{ text: string }>; stop_reason: string; usage: Record<string, number> };
    expect(whole.type).toBe('message');
    expect(whole.content[0]?.text).toBe(streamedText);
    expect(whole.stop_reason).toBe('max_tokens');
    expect(whole.usage.output_tokens).toBe(5);
  });

  it('caches a conversation like chat: the next turn reads the previous prompt from the cache (Anthropic usage: input_tokens excludes the reads)', async () => {
    const messages: Array<{ role: string; content: unknown }> = [
      { role: 'user', content: [{ type: 'text', text: 'First question about routing.' }] },
    ];
    const first = await streamMessages(sim.url, { model: 'test-model', max_tokens: 4, system: SYSTEM, messages });
    const firstUsage = first.find((event) => event.event === 'message_delta')?.data.usage as Record<string, number>;
    messages.push({
      role: 'assistant',
      content: [{ type: 'tool_use', id: 'toolu_1', name: 'lookup', input: { q: 1 } }],
    });
    messages.push({ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'found it' }] });
    const second = await streamMessages(sim.url, { model: 'test-model', max_tokens: 4, system: SYSTEM, messages });
    const startUsage = (second[0]?.data.message as { usage: Record<string, number> }).usage;
    const secondUsage = second.find((event) => event.event === 'message_delta')?.data.usage as Record<string, number>;
    const firstPrompt = (firstUsage.input_tokens ?? 0) + (firstUsage.cache_read_input_tokens ?? 0);
    expect(secondUsage.cache_read_input_tokens).toBeGreaterThanOrEqual(firstPrompt - 16);
    expect(secondUsage.cache_read_input_tokens).toBe(startUsage.cache_read_input_tokens);
    expect(secondUsage.cache_creation_input_tokens).toBe(0);
    expect(secondUsage.input_tokens).toBeGreaterThan(0);
  });

  it("reports usage as vLLM's Anthropic endpoint does when prompt-token details are off: input_tokens is the whole prompt, no cache fields", async () => {
    const events = await streamMessages(vllmLike.url, {
      model: 'test-model',
      max_tokens: 2,
      messages: [{ role: 'user', content: 'Hi' }],
    });
    const usage = events.find((event) => event.event === 'message_delta')?.data.usage as Record<string, number>;
    expect(Object.keys(usage).sort()).toEqual(['input_tokens', 'output_tokens']);
    expect(usage.input_tokens).toBeGreaterThan(0);
  });
});
