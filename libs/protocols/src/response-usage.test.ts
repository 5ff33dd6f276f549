import { describe, expect, it } from 'vitest';
import { usageFromTail } from './response-usage';

describe('usageFromTail', () => {
  it('reads a chat completion body, a stream tail with its usage chunk, and a Responses usage', () => {
    const body = JSON.stringify({ id: 'x', choices: [{ message: { content: 'the usage of "words"' } }], usage: { prompt_tokens: 357, total_tokens: 400, completion_tokens: 43, prompt_tokens_details: { cached_tokens: 336 } } });
    expect(usageFromTail(body)).toEqual({ promptTokens: 357, cachedTokens: 336, completionTokens: 43 });
    const stream = `data: {"choices":[{"delta":{"content":"x"}}]}\n\ndata: {"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":0}}}\n\ndata: [DONE]\n\n`;
    expect(usageFromTail(stream)).toEqual({ promptTokens: 12, cachedTokens: 0, completionTokens: 3 });
    const responses = 'event: response.completed\ndata: {"type":"response.completed","response":{"usage":{"input_tokens":90,"input_tokens_details":{"cached_tokens":64},"output_tokens":5}}}\n\n';
    expect(usageFromTail(responses)).toEqual({ promptTokens: 90, cachedTokens: 64, completionTokens: 5 });
  });

  it('says null for cached tokens the engine does not report, and null without usage', () => {
    expect(usageFromTail('{"usage":{"prompt_tokens":7,"completion_tokens":1,"prompt_tokens_details":null}}')).toEqual({ promptTokens: 7, cachedTokens: null, completionTokens: 1 });
    expect(usageFromTail('{"usage":{"prompt_tokens":7}}')).toEqual({ promptTokens: 7, cachedTokens: null, completionTokens: null });
    expect(usageFromTail('data: {"choices":[{"delta":{"content":"x"}}]}\n\ndata: [DONE]\n\n')).toBeNull();
    expect(usageFromTail('{"usage":null}')).toBeNull();
  });
});
