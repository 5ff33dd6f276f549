import { describe, expect, it } from 'vitest';
import { ResponsesRequest, responsesChatMessages, responsesChatTools } from './responses';
import { MessagesRequest } from '../anthropic/messages';
import { CompletionRequest } from './chat-completions';

describe('responsesChatMessages', () => {
  it('maps a function_call item to the assistant tool call (call_id as its id) and function_call_output to a tool message', () => {
    const messages = responsesChatMessages('Be brief.', [
      { role: 'user', content: 'weather in Paris?' },
      {
        type: 'function_call',
        id: 'fc_1',
        call_id: 'call_1',
        name: 'get_weather',
        arguments: '{"city": "Paris"}',
        status: 'completed',
      },
      { type: 'function_call_output', call_id: 'call_1', output: 'sunny' },
    ]);
    expect(messages).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'weather in Paris?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city": "Paris"}' } },
        ],
      },
      { role: 'tool', content: 'sunny', tool_call_id: 'call_1' },
    ]);
  });

  it('leaves reasoning items out of the prompt, as chat templates leave earlier reasoning out', () => {
    const messages = responsesChatMessages(null, [
      { role: 'user', content: 'hi' },
      { type: 'reasoning', id: 'rs_1', summary: [], content: [{ type: 'reasoning_text', text: 'thinking about it' }] },
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'hello' }] },
    ]);
    expect(messages).toEqual([
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: [{ type: 'text', text: 'hello' }] },
    ]);
  });

  it('maps a function_call without call_id without inventing an id', () => {
    const [message] = responsesChatMessages(null, [{ type: 'function_call', name: 'search', arguments: '{}' }]);
    expect(message?.tool_calls?.[0]).toEqual({ type: 'function', function: { name: 'search', arguments: '{}' } });
  });
});

describe('responsesChatTools', () => {
  it("moves a flat function tool's fields but type into `function`, as vLLM converts them for the template; hosted tools are dropped", () => {
    const parameters = { type: 'object', properties: { q: { type: 'string' } } };
    expect(
      responsesChatTools([
        { type: 'function', name: 'search', description: 'Search', parameters, strict: false },
        { type: 'web_search_preview' },
        { type: 'function', description: 'a function without a name is no tool' },
      ]),
    ).toEqual([{ type: 'function', function: { name: 'search', description: 'Search', parameters, strict: false } }]);
  });

  it('is undefined without a function tool (no tools block)', () => {
    expect(responsesChatTools(undefined)).toBeUndefined();
    expect(responsesChatTools([])).toBeUndefined();
    expect(responsesChatTools([{ type: 'file_search' }])).toBeUndefined();
  });
});

describe('cache_salt: one rule on every endpoint', () => {
  it.each(['tenant/a', 'a@b', 'x'.repeat(129), ''])(
    'refuses %j on Responses and Messages as on completions',
    (salt) => {
      expect(CompletionRequest.safeParse({ model: 'm', prompt: 'p', cache_salt: salt }).success).toBe(false);
      expect(ResponsesRequest.safeParse({ model: 'm', input: 'p', cache_salt: salt }).success).toBe(false);
      expect(
        MessagesRequest.safeParse({
          model: 'm',
          max_tokens: 1,
          messages: [{ role: 'user', content: 'p' }],
          cache_salt: salt,
        }).success,
      ).toBe(false);
    },
  );

  it('accepts a salt of 128 code points (256 UTF-16 units) everywhere', () => {
    const salt = '😀'.repeat(128);
    expect(ResponsesRequest.safeParse({ model: 'm', input: 'p', cache_salt: salt }).success).toBe(true);
    expect(
      MessagesRequest.safeParse({
        model: 'm',
        max_tokens: 1,
        messages: [{ role: 'user', content: 'p' }],
        cache_salt: salt,
      }).success,
    ).toBe(true);
  });
});
