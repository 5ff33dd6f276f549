import { describe, expect, it } from 'vitest';
import { usageFromStreamStart, usageFromTail } from './response-usage';

describe('usageFromTail', () => {
  it('reads a chat completion body, a stream tail with its usage chunk, and a Responses usage', () => {
    const body = JSON.stringify({
      id: 'x',
      choices: [{ message: { content: 'the usage of "words"' } }],
      usage: {
        prompt_tokens: 357,
        total_tokens: 400,
        completion_tokens: 43,
        prompt_tokens_details: { cached_tokens: 336 },
      },
    });
    expect(usageFromTail(body)).toEqual({ promptTokens: 357, cachedTokens: 336, completionTokens: 43 });
    const stream =
      `data: {"choices":[{"delta":{"content":"x"}}]}\n\ndata: {"choices":[],"usage":{"prompt_tokens":12,` +
      `"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":0}}}\n\ndata: ` +
      `[DONE]\n\n`;
    expect(usageFromTail(stream)).toEqual({ promptTokens: 12, cachedTokens: 0, completionTokens: 3 });
    const responses =
      'event: response.completed\ndata: {"type":"response.completed","response":{"usage":{"input_tokens":90,' +
      '"input_tokens_details":{"cached_tokens":64},"output_tokens":5}}}\n\n';
    expect(usageFromTail(responses)).toEqual({ promptTokens: 90, cachedTokens: 64, completionTokens: 5 });
  });

  it('says null for cached tokens the engine does not report, and null without usage', () => {
    expect(usageFromTail('{"usage":{"prompt_tokens":7,"completion_tokens":1,"prompt_tokens_details":null}}')).toEqual({
      promptTokens: 7,
      cachedTokens: null,
      completionTokens: 1,
    });
    expect(usageFromTail('{"usage":{"prompt_tokens":7}}')).toEqual({
      promptTokens: 7,
      cachedTokens: null,
      completionTokens: null,
    });
    expect(usageFromTail('data: {"choices":[{"delta":{"content":"x"}}]}\n\ndata: [DONE]\n\n')).toBeNull();
    expect(usageFromTail('{"usage":null}')).toBeNull();
  });
});

describe('usageFromTail on Anthropic Messages usage', () => {
  it('adds cache reads and writes to input_tokens (Anthropic leaves them out) and reports the reads as cached', () => {
    const body =
      '{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":20,' +
      '"output_tokens":4,"cache_read_input_tokens":160,"cache_creation_input_tokens":16}}';
    expect(usageFromTail(body)).toEqual({ promptTokens: 196, cachedTokens: 160, completionTokens: 4 });
    const stream =
      'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n' +
      'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":12,' +
      '"cache_read_input_tokens":0,"output_tokens":7}}\n\n' +
      'event: message_stop\ndata: {"type":"message_stop"}\n\n';
    expect(usageFromTail(stream)).toEqual({ promptTokens: 12, cachedTokens: 0, completionTokens: 7 });
  });

  it("reads vLLM's Anthropic usage (input_tokens is the whole prompt, no cache fields) as the prompt with cached unknown", () => {
    const vllm =
      'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":300,"output_tokens":9}}\n\n';
    expect(usageFromTail(vllm)).toEqual({ promptTokens: 300, cachedTokens: null, completionTokens: 9 });
    expect(usageFromTail('{"usage":{"input_tokens":5,"output_tokens":1,"cache_read_input_tokens":null}}')).toEqual({
      promptTokens: 5,
      cachedTokens: null,
      completionTokens: 1,
    });
    // An OpenAI usage that also names the Anthropic cache fields (LiteLLM): prompt_tokens already counts them.
    expect(
      usageFromTail(
        '{"usage":{"prompt_tokens":50,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":32},"cache_read_input_tokens":32}}',
      ),
    ).toEqual({ promptTokens: 50, cachedTokens: 32, completionTokens: 2 });
  });
});

describe('usageFromStreamStart (Anthropic streams whose message_delta carries only output_tokens)', () => {
  const head =
    'event: ping\ndata: {"type":"ping"}\n\n' +
    'event: message_start\ndata: {"type":"message_start","message":{"id":"m","content":[],"usage":{"input_tokens":10,' +
    '"cache_read_input_tokens":96,"cache_creation_input_tokens":4,"output_tokens":1}}}\n\n' +
    'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}\n\n';
  const tail =
    'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}\n\nevent: ' +
    'message_stop\ndata: {"type":"message_stop"}\n\n';

  it("takes the prompt's part from message_start and the generated tokens from the last usage", () => {
    expect(usageFromTail(tail)).toBeNull();
    expect(usageFromStreamStart(head, tail)).toEqual({ promptTokens: 110, cachedTokens: 96, completionTokens: 15 });
  });

  it('is null without a message_start usage, and reads only that event', () => {
    expect(usageFromStreamStart('event: ping\ndata: {"type":"ping"}\n\n', tail)).toBeNull();
    const withoutUsage =
      'event: message_start\ndata: {"type":"message_start","message":{"id":"m"}}\n\nevent: message_delta\ndata: ' +
      '{"usage":{"input_tokens":5,"output_tokens":2}}\n\n';
    expect(usageFromStreamStart(withoutUsage, tail)).toBeNull();
  });
});
