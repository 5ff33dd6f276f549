import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openAiSchemaChecker } from './openai-spec';
import { startTestSim, type TestSim } from './start-test-sim';

/**
 * Agent turns on `POST /v1/responses`: reasoning items, function calls, their stream events (checked
 * against OpenAI's OpenAPI spec, as test/responses-openapi.test.ts checks the text events), and a
 * `previous_response_id` follow-up carrying the call's output that hits the prefix cache.
 */
const EVENT_SCHEMAS: Record<string, string> = {
  'response.created': 'ResponseCreatedEvent',
  'response.in_progress': 'ResponseInProgressEvent',
  'response.output_item.added': 'ResponseOutputItemAddedEvent',
  'response.content_part.added': 'ResponseContentPartAddedEvent',
  'response.reasoning_text.delta': 'ResponseReasoningTextDeltaEvent',
  'response.reasoning_text.done': 'ResponseReasoningTextDoneEvent',
  'response.output_text.delta': 'ResponseTextDeltaEvent',
  'response.output_text.done': 'ResponseTextDoneEvent',
  'response.function_call_arguments.delta': 'ResponseFunctionCallArgumentsDeltaEvent',
  'response.function_call_arguments.done': 'ResponseFunctionCallArgumentsDoneEvent',
  'response.content_part.done': 'ResponseContentPartDoneEvent',
  'response.output_item.done': 'ResponseOutputItemDoneEvent',
  'response.completed': 'ResponseCompletedEvent',
};

const tools = [
  {
    type: 'function' as const,
    name: 'search',
    description: 'web search',
    parameters: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] },
    strict: false,
  },
  {
    type: 'function' as const,
    name: 'get_weather',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    strict: false,
  },
];
const instructions = 'You are an agent with tools. '.repeat(30);

interface StreamedEvent {
  readonly type: string;
  readonly sequence_number: number;
  readonly [field: string]: any;
}

describe('vllm-sim /v1/responses agent turns', () => {
  let sim: TestSim;
  let client: OpenAI;
  let check: (schema: string, value: unknown) => void;
  beforeAll(async () => {
    sim = await startTestSim({ profile: 'fast', timeScale: 1, reasoningTokens: 3, toolCallProbability: 0 });
    client = new OpenAI({ baseURL: `${sim.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    check = openAiSchemaChecker();
  });
  afterAll(() => sim.close());

  const post = (body: object): Promise<Response> =>
    fetch(`${sim.url}/v1/responses`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  const streamEvents = async (body: object): Promise<StreamedEvent[]> => {
    const text = await (await post({ ...body, stream: true })).text();
    return text
      .split('\n\n')
      .filter((block) => block.trim() !== '')
      .map((block) => {
        const data = JSON.parse(/^data: (.+)$/m.exec(block)?.[1] ?? 'null') as StreamedEvent;
        expect(data.type).toBe(/^event: (.+)$/m.exec(block)?.[1]);
        check(EVENT_SCHEMAS[data.type] ?? `missing ${data.type}`, data);
        check('ResponseStreamEvent', data);
        return data;
      });
  };

  it('answers reasoning then a function call (non-streaming): a reasoning item, a function_call item, reasoning_tokens in usage', async () => {
    const request = {
      model: 'test-model',
      instructions,
      input: 'find kv routers',
      tools,
      tool_choice: 'required',
      max_output_tokens: 16,
    };
    check('CreateResponse', request);
    const body = (await (await post(request)).json()) as any;
    check('Response', body);
    expect(body.status).toBe('completed');
    expect(body.output.map((item: { type: string }) => item.type)).toEqual(['reasoning', 'function_call']);
    const [reasoning, call] = body.output;
    expect(reasoning).toMatchObject({
      id: expect.stringMatching(/^rs_[0-9a-f]{32}$/),
      summary: [],
      status: 'completed',
    });
    expect(reasoning.content).toHaveLength(1);
    expect(reasoning.content[0].type).toBe('reasoning_text');
    expect(reasoning.content[0].text.trim().split(' ')).toHaveLength(3);
    expect(call).toMatchObject({
      id: expect.stringMatching(/^fc_[0-9a-f]{32}$/),
      call_id: expect.stringMatching(/^call_[0-9a-f]{32}$/),
      name: 'search',
      status: 'completed',
    });
    // 16 tokens (max_output_tokens' minimum in the spec): 3 reasoning, the call's header, 12 argument pieces (the words of `query`).
    expect(JSON.parse(call.arguments).query.split(' ')).toHaveLength(12);
    expect(body.usage.output_tokens).toBe(16);
    expect(body.usage.output_tokens_details.reasoning_tokens).toBe(3);
  });

  it(
    'renders flat function tools in the prompt as chat renders its tools (vLLM moves every field ' +
      'but type into `function`), hosted tools not at all; echoes tool_choice',
    async () => {
      const parameters = { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] };
      const chat = (await (
        await fetch(`${sim.url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            model: 'test-model',
            messages: [{ role: 'user', content: 'tools?' }],
            tools: [
              {
                type: 'function',
                function: { name: 'search', description: 'Search the web', parameters, strict: false },
              },
            ],
            tool_choice: 'none',
            max_tokens: 16,
          }),
        })
      ).json()) as { usage: { prompt_tokens: number } };
      const flat = [
        { type: 'function', name: 'search', description: 'Search the web', parameters, strict: false },
        { type: 'web_search_preview' },
      ];
      const request = {
        model: 'test-model',
        input: 'tools?',
        tools: flat,
        tool_choice: 'none',
        max_output_tokens: 16,
        store: false,
      };
      check('CreateResponse', request);
      const response = (await (await post(request)).json()) as any;
      check('Response', response);
      expect(response.usage.input_tokens).toBe(chat.usage.prompt_tokens);
      expect(response.tool_choice).toBe('none');
      // Without any function tool, no tools block: the same prompt as no tools at all.
      const hostedOnly = (await (
        await post({
          model: 'test-model',
          input: 'tools?',
          tools: [{ type: 'web_search_preview' }],
          max_output_tokens: 16,
          store: false,
        })
      ).json()) as any;
      const none = (await (
        await post({ model: 'test-model', input: 'tools?', max_output_tokens: 16, store: false })
      ).json()) as any;
      expect(hostedOnly.usage.input_tokens).toBe(none.usage.input_tokens);
      expect(hostedOnly.tool_choice).toBe('auto');
    },
  );

  it('streams reasoning, then the function call, each event a ResponseStreamEvent; the openai client assembles the same output', async () => {
    const request: Parameters<OpenAI['responses']['stream']>[0] = {
      model: 'test-model',
      instructions,
      input: 'weather in Paris?',
      tools,
      tool_choice: { type: 'function', name: 'get_weather' },
      max_output_tokens: 7,
    };
    const events = await streamEvents(request);
    expect(events.map((event) => event.sequence_number)).toEqual(events.map((_event, index) => index));
    const types = events.map((event) => event.type);
    expect(types).toEqual([
      'response.created',
      'response.in_progress',
      'response.output_item.added',
      'response.content_part.added',
      ...Array<string>(3).fill('response.reasoning_text.delta'),
      'response.reasoning_text.done',
      'response.content_part.done',
      'response.output_item.done',
      'response.output_item.added',
      ...Array<string>(3).fill('response.function_call_arguments.delta'),
      'response.function_call_arguments.done',
      'response.output_item.done',
      'response.completed',
    ]);
    const added = events.filter((event) => event.type === 'response.output_item.added');
    expect(added.map((event) => [event.output_index, event.item.type])).toEqual([
      [0, 'reasoning'],
      [1, 'function_call'],
    ]);
    expect(added[1]?.item).toMatchObject({ name: 'get_weather', arguments: '', status: 'in_progress' });
    const pieces = events
      .filter((event) => event.type === 'response.function_call_arguments.delta')
      .map((event) => event.delta as string);
    const done = events.find((event) => event.type === 'response.function_call_arguments.done');
    expect(done?.arguments).toBe(pieces.join(''));
    expect(JSON.parse(done?.arguments)).toEqual({ city: expect.any(String) });
    const completed = events.at(-1)?.response;
    expect(completed.output[1]).toMatchObject({
      type: 'function_call',
      name: 'get_weather',
      arguments: done?.arguments,
      status: 'completed',
    });
    expect(completed.usage.output_tokens_details.reasoning_tokens).toBe(3);

    const stream = client.responses.stream(request);
    const final = await stream.finalResponse();
    expect(final.output.map((item) => item.type)).toEqual(['reasoning', 'function_call']);
    const call = final.output[1];
    if (call?.type !== 'function_call') throw new Error('no function call');
    expect(JSON.parse(call.arguments)).toEqual({ city: expect.any(String) });
  });

  it('streams reasoning then text without a call (tool_choice none), the text events as before', async () => {
    const events = await streamEvents({
      model: 'test-model',
      input: 'just talk',
      tools,
      tool_choice: 'none',
      max_output_tokens: 5,
    });
    const items = events.filter((event) => event.type === 'response.output_item.done').map((event) => event.item.type);
    expect(items).toEqual(['reasoning', 'message']);
    expect(events.filter((event) => event.type === 'response.output_text.delta')).toHaveLength(2);
    const completed = events.at(-1)?.response;
    check('Response', completed);
    // max_output_tokens reached: incomplete, as vLLM reports a cut answer.
    expect(completed.status).toBe('incomplete');
  });

  it('a named tool that is not offered is a 400; tool_choice without tools too', async () => {
    expect(
      (await post({ model: 'test-model', input: 'x', tools, tool_choice: { type: 'function', name: 'nope' } })).status,
    ).toBe(400);
    expect((await post({ model: 'test-model', input: 'x', tool_choice: 'required' })).status).toBe(400);
  });

  it('continues a function call with previous_response_id and function_call_output: the follow-up extends the prompt and hits the cache', async () => {
    const first = await client.responses.create({
      model: 'test-model',
      instructions,
      input: 'search for kv-cache routing papers',
      tools,
      tool_choice: 'required',
      max_output_tokens: 6,
    });
    const call = first.output.find((item) => item.type === 'function_call');
    if (call?.type !== 'function_call') throw new Error('no function call');
    const firstInput = first.usage?.input_tokens ?? 0;
    const second = await client.responses.create({
      model: 'test-model',
      instructions,
      previous_response_id: first.id,
      input: [{ type: 'function_call_output', call_id: call.call_id, output: 'three papers found' }],
      tools,
      tool_choice: 'none',
      max_output_tokens: 4,
    });
    check('Response', JSON.parse(JSON.stringify(second)));
    expect(second.output.map((item) => item.type)).toEqual(['reasoning', 'message']);
    // The prompt holds the first turn and its call (the reasoning left out): longer, and cached through the first prompt's full blocks.
    expect(second.usage?.input_tokens).toBeGreaterThan(firstInput);
    expect(second.usage?.input_tokens_details.cached_tokens).toBeGreaterThanOrEqual(
      Math.floor((firstInput - 16) / 16) * 16,
    );
    expect(second.usage?.input_tokens_details.cached_tokens).toBeGreaterThan(0);
  });
});

describe('vllm-sim /v1/responses tool_choice "auto"', () => {
  let sim: TestSim;
  beforeAll(async () => {
    sim = await startTestSim({ profile: 'fast', toolCallProbability: 0.5 });
  });
  afterAll(() => sim.close());

  it('decides the same for the same request (the draw of chat turns), and calls on some prompts, not all', async () => {
    const decide = async (input: string): Promise<string> => {
      const response = await fetch(`${sim.url}/v1/responses`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'test-model', input, tools, max_output_tokens: 3, store: false }),
      });
      const body = (await response.json()) as { output: Array<{ type: string }> };
      return body.output.map((item) => item.type).join(',');
    };
    const inputs = Array.from({ length: 16 }, (_unused, index) => `question number ${index}`);
    const decisions = await Promise.all(inputs.map(decide));
    expect(await Promise.all(inputs.map(decide))).toEqual(decisions);
    expect(new Set(decisions)).toEqual(new Set(['function_call', 'message']));
  });
});
