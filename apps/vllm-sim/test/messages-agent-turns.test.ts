import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestSim, type TestSim } from './start-test-sim';

/**
 * Agent turns on `POST /v1/messages`, read through the official `@anthropic-ai/sdk` (its stream parser
 * assembles the blocks, so a malformed event would fail it): a thinking block from the shared
 * `reasoningTokens`, then text or one tool_use block, and a tool_result follow-up that hits the cache.
 */
const SYSTEM = `You are an agent with tools. ${'Use the tools when asked. '.repeat(50)}`;
const TOOLS: Anthropic.Messages.Tool[] = [
  {
    name: 'lookup_runbook',
    description: 'Finds a runbook section.',
    input_schema: { type: 'object', properties: { section: { type: 'string' } }, required: ['section'] },
  },
  { name: 'page_oncall', input_schema: { type: 'object', properties: { team: { type: 'string' } } } },
];

describe('vllm-sim Anthropic Messages agent turns', () => {
  let sim: TestSim;
  let client: Anthropic;
  beforeAll(async () => {
    sim = await startTestSim({
      profile: 'fast',
      reasoningTokens: 3,
      toolCallProbability: 0,
      promptTokensDetails: true,
    });
    client = new Anthropic({ baseURL: sim.url, apiKey: 'unused', maxRetries: 0 });
  });
  afterAll(() => sim.close());

  it('answers thinking then tool_use (non-streaming) with stop_reason tool_use', async () => {
    const message = await client.messages.create({
      model: 'test-model',
      max_tokens: 7,
      system: SYSTEM,
      tools: TOOLS,
      tool_choice: { type: 'any' },
      messages: [{ role: 'user', content: 'Find the failover section.' }],
    });
    expect(message.content.map((block) => block.type)).toEqual(['thinking', 'tool_use']);
    const [thinking, toolUse] = message.content;
    if (thinking?.type !== 'thinking' || toolUse?.type !== 'tool_use') throw new Error('unexpected blocks');
    expect(thinking.thinking.trim().split(' ')).toHaveLength(3);
    expect(thinking.signature).toMatch(/^[0-9a-f]{32}$/);
    expect(toolUse.id).toMatch(/^toolu_/);
    expect(toolUse.name).toBe('lookup_runbook');
    // 7 tokens: 3 thinking, the call's header, 3 argument pieces (the words of `section`).
    expect((toolUse.input as { section: string }).section.split(' ')).toHaveLength(3);
    expect(message.stop_reason).toBe('tool_use');
    expect(message.usage.output_tokens).toBe(7);
  });

  it('streams thinking_delta per reasoning token, then tool_use with one input_json_delta per argument token; the SDK assembles the same blocks', async () => {
    const stream = client.messages.stream({
      model: 'test-model',
      max_tokens: 6,
      system: SYSTEM,
      tools: TOOLS,
      tool_choice: { type: 'tool', name: 'page_oncall' },
      messages: [{ role: 'user', content: 'Page someone.' }],
    });
    const events: Anthropic.Messages.RawMessageStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    const final = await stream.finalMessage();
    expect(events.map((event) => event.type)).toEqual([
      'message_start',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    const starts = events.filter((event) => event.type === 'content_block_start');
    expect(starts.map((event) => [event.index, event.content_block.type])).toEqual([
      [0, 'thinking'],
      [1, 'tool_use'],
    ]);
    const deltaTypes = events.flatMap((event) => (event.type === 'content_block_delta' ? [event.delta.type] : []));
    expect(deltaTypes).toEqual([
      'thinking_delta',
      'thinking_delta',
      'thinking_delta',
      'signature_delta',
      'input_json_delta',
      'input_json_delta',
    ]);
    expect(final.content[0]).toMatchObject({ type: 'thinking', signature: expect.stringMatching(/^[0-9a-f]{32}$/) });
    expect(final.content.map((block) => block.type)).toEqual(['thinking', 'tool_use']);
    const toolUse = final.content[1];
    if (toolUse?.type !== 'tool_use') throw new Error('no tool_use');
    expect(toolUse.name).toBe('page_oncall');
    expect(toolUse.input).toEqual({ team: expect.any(String) });
    expect(final.stop_reason).toBe('tool_use');
  });

  it('tool_choice none answers thinking then text; thinking disabled skips the thinking block', async () => {
    const none = await client.messages.create({
      model: 'test-model',
      max_tokens: 5,
      system: SYSTEM,
      tools: TOOLS,
      tool_choice: { type: 'none' },
      messages: [{ role: 'user', content: 'Just say hi.' }],
    });
    expect(none.content.map((block) => block.type)).toEqual(['thinking', 'text']);
    expect(none.stop_reason).toBe('max_tokens');
    const plain = await client.messages.create({
      model: 'test-model',
      max_tokens: 5,
      system: SYSTEM,
      thinking: { type: 'disabled' },
      messages: [{ role: 'user', content: 'Just say hi.' }],
    });
    expect(plain.content.map((block) => block.type)).toEqual(['text']);
    const text = plain.content[0];
    expect(text?.type === 'text' ? text.text.trim().split(' ') : []).toHaveLength(5);
  });

  it('a tool that is not offered is a 400', async () => {
    await expect(
      client.messages.create({
        model: 'test-model',
        max_tokens: 5,
        tools: TOOLS,
        tool_choice: { type: 'tool', name: 'nope' },
        messages: [{ role: 'user', content: 'x' }],
      }),
    ).rejects.toMatchObject({ status: 400 });
  });

  it('continues with the tool_result: the follow-up prompt extends the first and reads it from the cache', async () => {
    const messages: Anthropic.Messages.MessageParam[] = [
      { role: 'user', content: 'Find the failover section, then summarise it.' },
    ];
    const first = await client.messages.create({
      model: 'test-model',
      max_tokens: 6,
      system: SYSTEM,
      tools: TOOLS,
      tool_choice: { type: 'any' },
      messages,
    });
    const toolUse = first.content.find((block) => block.type === 'tool_use');
    if (toolUse?.type !== 'tool_use') throw new Error('no tool_use');
    const firstPrompt = first.usage.input_tokens + (first.usage.cache_read_input_tokens ?? 0);
    messages.push({ role: 'assistant', content: first.content });
    messages.push({
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: toolUse.id, content: 'Section 4: fail over to the standby region.' },
      ],
    });
    const second = await client.messages.create({
      model: 'test-model',
      max_tokens: 4,
      system: SYSTEM,
      tools: TOOLS,
      tool_choice: { type: 'auto' },
      messages,
    });
    expect(second.content.map((block) => block.type)).toEqual(['thinking', 'text']);
    expect(second.usage.cache_read_input_tokens).toBeGreaterThanOrEqual(Math.floor((firstPrompt - 16) / 16) * 16);
    expect(second.usage.cache_read_input_tokens).toBeGreaterThan(0);
  });
});
