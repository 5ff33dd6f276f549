import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postJson, postStream, startTestSim, type TestSim } from './start-test-sim';

/** Tool calls, reasoning and include_usage, streamed and not, as vLLM's OpenAI server shapes them. */
const tools = [
  {
    type: 'function',
    function: {
      name: 'search',
      description: 'web search',
      parameters: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] },
    },
  },
  {
    type: 'function',
    function: {
      name: 'get_weather',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  },
];
const chat = (content: string, extra: object = {}) => ({
  model: 'test-model',
  messages: [{ role: 'user', content }],
  max_tokens: 6,
  ...extra,
});
const chunksOf = (events: string[]): any[] =>
  events.filter((event) => event !== 'data: [DONE]').map((event) => JSON.parse(event.slice(6)));

describe('vllm-sim tool calls', () => {
  let sim: TestSim;
  beforeAll(async () => {
    sim = await startTestSim({ profile: 'fast' });
  });
  afterAll(() => sim.close());

  it('streams a tool call as vLLM does: role chunk, id + name with empty arguments, one argument piece per token, finish_reason tool_calls', async () => {
    const result = await postStream(
      sim.url,
      '/v1/chat/completions',
      chat('find kv routers', { tools, tool_choice: 'required', stream_options: { include_usage: true } }),
    );
    expect(result.events.at(-1)).toBe('data: [DONE]');
    const chunks = chunksOf(result.events);
    expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
    const header = chunks[1].choices[0];
    expect(header.delta).toEqual({
      tool_calls: [
        {
          index: 0,
          id: expect.stringMatching(/^chatcmpl-tool-[0-9a-f]{32}$/),
          type: 'function',
          function: { name: 'search', arguments: '' },
        },
      ],
    });
    expect(header.finish_reason).toBeNull();
    const argumentChunks = chunks.slice(2, -1);
    expect(argumentChunks).toHaveLength(5); // 6 tokens: the header's step, then 5 argument pieces
    for (const chunk of argumentChunks)
      expect(Object.keys(chunk.choices[0].delta.tool_calls[0])).toEqual(['index', 'function']);
    expect(argumentChunks.slice(0, -1).every((chunk) => chunk.choices[0].finish_reason === null)).toBe(true);
    expect(argumentChunks.at(-1).choices[0]).toMatchObject({ finish_reason: 'tool_calls', stop_reason: null });
    const args = JSON.parse(
      argumentChunks.map((chunk) => chunk.choices[0].delta.tool_calls[0].function.arguments).join(''),
    );
    expect(Object.keys(args)).toEqual(['query']);
    expect(args.query.split(' ')).toHaveLength(5);
    const usage = chunks.at(-1);
    expect(usage.choices).toEqual([]);
    expect(usage.usage).toMatchObject({ completion_tokens: 6 });
  });

  it('the official openai client assembles the streamed call', async () => {
    const client = new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const stream = client.chat.completions.stream({
      model: 'test-model',
      messages: [{ role: 'user', content: 'weather in Paris?' }],
      max_tokens: 4,
      tools: tools as OpenAI.Chat.ChatCompletionTool[],
      tool_choice: { type: 'function', function: { name: 'get_weather' } },
    });
    const completion = await stream.finalChatCompletion();
    const choice = completion.choices[0];
    expect(choice?.finish_reason).toBe('tool_calls');
    const call = choice?.message.tool_calls?.[0];
    expect(call?.type).toBe('function');
    if (call?.type !== 'function') throw new Error('no function call');
    expect(call.function.name).toBe('get_weather');
    expect(call.id).toMatch(/^chatcmpl-tool-/);
    expect(JSON.parse(call.function.arguments)).toEqual({ city: expect.any(String) });
  });

  it('answers a non-streaming tool call with content null, tool_calls and finish_reason tool_calls', async () => {
    const { status, json } = await postJson(
      sim.url,
      '/v1/chat/completions',
      chat('look it up', { tools, tool_choice: 'required' }),
    );
    expect(status).toBe(200);
    const choice = json.choices[0];
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message).toEqual({
      role: 'assistant',
      reasoning_content: null,
      content: null,
      tool_calls: [
        {
          id: expect.stringMatching(/^chatcmpl-tool-[0-9a-f]{32}$/),
          type: 'function',
          function: { name: 'search', arguments: expect.any(String) },
        },
      ],
    });
    expect(JSON.parse(choice.message.tool_calls[0].function.arguments).query.split(' ')).toHaveLength(5);
    expect(json.usage.completion_tokens).toBe(6);
  });

  it('tool_choice "none" answers with text; a named tool that is not offered is a 400', async () => {
    const none = await postJson(sim.url, '/v1/chat/completions', chat('just talk', { tools, tool_choice: 'none' }));
    expect(none.json.choices[0].finish_reason).toBe('length');
    expect(none.json.choices[0].message.tool_calls).toEqual([]);
    expect(none.json.choices[0].message.content.trim().split(' ')).toHaveLength(6);
    const missing = await postJson(
      sim.url,
      '/v1/chat/completions',
      chat('x', { tools, tool_choice: { type: 'function', function: { name: 'nope' } } }),
    );
    expect(missing.status).toBe(400);
    expect(missing.json.error.message).toContain('does not match any of the specified `tools`');
  });

  it('"auto" decides the same for the same request, and calls on about toolCallProbability of prompts', async () => {
    const decisions = await Promise.all(
      Array.from({ length: 20 }, (_, index) =>
        postJson(sim.url, '/v1/chat/completions', chat(`question ${index}`, { tools, max_tokens: 2 })),
      ),
    );
    const called = decisions.map((response) => response.json.choices[0].finish_reason === 'tool_calls');
    expect(called.some(Boolean)).toBe(true);
    expect(called.every(Boolean)).toBe(false);
    const again = await Promise.all(
      Array.from({ length: 20 }, (_, index) =>
        postJson(
          sim.url,
          '/v1/chat/completions',
          chat(`question ${index}`, { tools, max_tokens: 2, tool_choice: 'auto' }),
        ),
      ),
    );
    expect(again.map((response) => response.json.choices[0].finish_reason === 'tool_calls')).toEqual(called);
  });
});

describe('vllm-sim reasoning', () => {
  let sim: TestSim;
  beforeAll(async () => {
    sim = await startTestSim({ profile: 'fast', reasoningTokens: 3, toolCallProbability: 0 });
  });
  afterAll(() => sim.close());

  it('streams reasoning_content (and reasoning) first, then content; reasoning tokens count as completion tokens', async () => {
    const result = await postStream(
      sim.url,
      '/v1/chat/completions',
      chat('think first', { max_tokens: 5, stream_options: { include_usage: true } }),
    );
    const chunks = chunksOf(result.events);
    expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
    const deltas = chunks.slice(1, -1).map((chunk) => chunk.choices[0].delta);
    expect(deltas.map((delta) => Object.keys(delta))).toEqual([
      ['reasoning_content', 'reasoning'],
      ['reasoning_content', 'reasoning'],
      ['reasoning_content', 'reasoning'],
      ['content'],
      ['content'],
    ]);
    for (const delta of deltas.slice(0, 3)) expect(delta.reasoning).toBe(delta.reasoning_content);
    expect(chunks.at(-2).choices[0].finish_reason).toBe('length');
    expect(chunks.at(-1).usage.completion_tokens).toBe(5);
  });

  it('puts reasoning in message.reasoning_content, then a tool call when one is forced', async () => {
    const text = await postJson(sim.url, '/v1/chat/completions', chat('think then say', { max_tokens: 5 }));
    expect(text.json.choices[0].message.reasoning_content.trim().split(' ')).toHaveLength(3);
    expect(text.json.choices[0].message.content.trim().split(' ')).toHaveLength(2);
    const tool = await postStream(
      sim.url,
      '/v1/chat/completions',
      chat('think then call', { max_tokens: 6, tools, tool_choice: 'required' }),
    );
    const kinds = chunksOf(tool.events)
      .slice(1)
      .map((chunk) =>
        chunk.choices[0].delta.reasoning_content
          ? 'reasoning'
          : chunk.choices[0].delta.tool_calls[0].id
            ? 'tool-start'
            : 'arguments',
      );
    expect(kinds).toEqual(['reasoning', 'reasoning', 'reasoning', 'tool-start', 'arguments', 'arguments']);
  });

  it('chat_template_kwargs.enable_thinking=false skips reasoning', async () => {
    const { json } = await postJson(
      sim.url,
      '/v1/chat/completions',
      chat('no thinking', { max_tokens: 4, chat_template_kwargs: { enable_thinking: false } }),
    );
    expect(json.choices[0].message.reasoning_content).toBeNull();
    expect(json.choices[0].message.content.trim().split(' ')).toHaveLength(4);
  });
});

describe('vllm-sim stream_options.include_usage', () => {
  let sim: TestSim;
  beforeAll(async () => {
    sim = await startTestSim({ profile: 'fast' });
  });
  afterAll(() => sim.close());

  it('sends no usage chunk without the option', async () => {
    const result = await postStream(sim.url, '/v1/chat/completions', chat('no usage please'));
    const chunks = chunksOf(result.events);
    expect(chunks.every((chunk) => chunk.choices.length === 1 && chunk.usage === undefined)).toBe(true);
    expect(chunks.at(-1).choices[0].finish_reason).toBe('length');
  });

  it('ends with a choices-less usage chunk carrying cached_tokens on a prefix hit', async () => {
    const body = chat(`${'a long shared system prompt '.repeat(20)}`, { stream_options: { include_usage: true } });
    await postStream(sim.url, '/v1/chat/completions', body);
    const result = await postStream(sim.url, '/v1/chat/completions', body);
    const usage = chunksOf(result.events).at(-1);
    expect(usage.choices).toEqual([]);
    expect(usage.usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);
    expect(usage.usage.total_tokens).toBe(usage.usage.prompt_tokens + 6);
  });
});
