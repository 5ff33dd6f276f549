import { describe, expect, it } from 'vitest';
import { messagesAsChat } from './messages-as-chat';
import type { MessagesRequest } from './messages';

describe('messagesAsChat', () => {
  it('turns system, tools, text, images, tool use and tool results into the chat vLLM templates', () => {
    const body = {
      model: 'm',
      max_tokens: 16,
      system: [{ type: 'text', text: 'be brief' }],
      tools: [{ name: 'f', description: 'd', input_schema: { type: 'object' } }],
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'hi' },
            { type: 'image', source: { type: 'url', url: 'https://x/y.png' } },
          ],
        },
        { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'f', input: { a: 1 } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'done' }] },
      ],
    } as unknown as MessagesRequest;
    const { messages, tools } = messagesAsChat(body);
    expect(messages[0]).toEqual({ role: 'system', content: 'be brief' });
    expect(messages[1]?.content).toEqual([
      { type: 'text', text: 'hi' },
      { type: 'image_url', image_url: { url: 'https://x/y.png' } },
    ]);
    expect(messages[2]?.tool_calls?.[0]?.function).toEqual({ name: 'f', arguments: '{"a":1}' });
    expect(messages[3]).toEqual({ role: 'tool', tool_call_id: 't1', content: 'done' });
    expect(tools).toEqual([
      { type: 'function', function: { name: 'f', description: 'd', parameters: { type: 'object' } } },
    ]);
  });

  it('never runs or trusts a hostile image source: objects where strings belong become empty', () => {
    const hostile = { toString: 1 };
    const body = {
      model: 'm',
      max_tokens: 16,
      messages: [
        { role: 'user', content: [{ type: 'image', source: { type: 'url', url: hostile } }] },
        { role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: hostile, data: hostile } }] },
      ],
    } as unknown as MessagesRequest;
    const { messages } = messagesAsChat(body);
    expect(messages[0]?.content).toEqual([{ type: 'image_url', image_url: { url: '' } }]);
    expect(messages[1]?.content).toEqual([{ type: 'image_url', image_url: { url: 'data:image/jpeg;base64,' } }]);
  });
});
