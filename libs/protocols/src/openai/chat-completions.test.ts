import { describe, expect, it } from 'vitest';
import { ChatCompletionRequest, CompletionRequest } from './chat-completions';

describe('ChatCompletionRequest', () => {
  it('accepts string and array content, tools, and keeps unknown fields', () => {
    const parsed = ChatCompletionRequest.parse({
      model: 'm',
      messages: [
        { role: 'system', content: 'be brief' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'hi' },
            { type: 'image_url', image_url: { url: 'http://x/y.png' } },
          ],
        },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'c1', type: 'function', function: { name: 'search', arguments: '{}' } }],
        },
        { role: 'tool', content: 'result', tool_call_id: 'c1' },
      ],
      tools: [{ type: 'function', function: { name: 'search' } }],
      top_k: 5,
    });
    expect(parsed.messages).toHaveLength(4);
    expect((parsed as Record<string, unknown>).top_k).toBe(5);
  });

  it('rejects missing messages, empty messages, wrong types and bad token counts', () => {
    expect(ChatCompletionRequest.safeParse({ model: 'm' }).success).toBe(false);
    expect(ChatCompletionRequest.safeParse({ model: 'm', messages: [] }).success).toBe(false);
    expect(ChatCompletionRequest.safeParse({ model: 'm', messages: 'hi' }).success).toBe(false);
    expect(
      ChatCompletionRequest.safeParse({ model: 'm', messages: [{ role: 'user', content: 'x' }], max_tokens: 0 })
        .success,
    ).toBe(false);
    expect(ChatCompletionRequest.safeParse({ model: '', messages: [{ role: 'user', content: 'x' }] }).success).toBe(
      false,
    );
  });

  it('takes cache_salt as vLLM does: a non-empty string, or null for none', () => {
    const withSalt = (cache_salt: unknown) =>
      ChatCompletionRequest.safeParse({ model: 'm', messages: [{ role: 'user', content: 'x' }], cache_salt }).success;
    expect([withSalt('tenant-a'), withSalt(null), withSalt(undefined)]).toEqual([true, true, true]);
    expect([withSalt(''), withSalt(7), withSalt(['a'])]).toEqual([false, false, false]);
    expect([withSalt('a'.repeat(128)), withSalt('é'.repeat(128)), withSalt('a'.repeat(129))]).toEqual([
      true,
      true,
      false,
    ]);
    expect(['a@b', 'a/b', 'a\\b', 'a\u0000b', 'base64url-_ok'].map(withSalt)).toEqual([
      false,
      false,
      false,
      false,
      true,
    ]);
  });
});

describe('CompletionRequest', () => {
  it('accepts every prompt form vLLM takes', () => {
    for (const prompt of ['text', ['a', 'b'], [1, 2, 3], [[1, 2], [3]]]) {
      expect(CompletionRequest.safeParse({ model: 'm', prompt }).success).toBe(true);
    }
  });

  it('rejects empty and mixed prompts', () => {
    for (const prompt of [[], ['a', 1], [[]], [-1]]) {
      expect(CompletionRequest.safeParse({ model: 'm', prompt }).success).toBe(false);
    }
  });
});
