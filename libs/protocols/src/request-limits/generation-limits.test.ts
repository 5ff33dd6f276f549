import { describe, expect, it } from 'vitest';
import { checkGenerationLimits, DEFAULT_GENERATION_LIMITS, type GenerationLimits } from './generation-limits';

const small: GenerationLimits = {
  maxMessages: 4,
  maxTools: 2,
  maxContentParts: 5,
  maxContentPartsPerMessage: 3,
  maxToolCalls: 3,
  maxPromptEntries: 3,
  maxPromptTokenIds: 6,
  maxStopSequences: 2,
};
const user = (content: unknown = 'hi') => ({ role: 'user', content });
const parts = (count: number) => Array.from({ length: count }, () => ({ type: 'text', text: 'x' }));
const calls = (count: number) => Array.from({ length: count }, () => ({ function: { name: 'f', arguments: '{}' } }));

describe('checkGenerationLimits', () => {
  it('accepts a body at every limit', () => {
    const chat = {
      model: 'm',
      messages: [user(parts(3)), user(parts(2)), { role: 'assistant', tool_calls: calls(3) }, user()],
      tools: [{}, {}],
      stop: ['a', 'b'],
    };
    expect(checkGenerationLimits(chat, small)).toBeNull();
    expect(
      checkGenerationLimits(
        {
          model: 'm',
          prompt: [
            [1, 2],
            [3, 4],
            [5, 6],
          ],
        },
        small,
      ),
    ).toBeNull();
    expect(checkGenerationLimits({ model: 'm', prompt: [1, 2, 3, 4, 5, 6] }, small)).toBeNull();
    expect(checkGenerationLimits({ model: 'm', prompt: ['a', 'b', 'c'] }, small)).toBeNull();
  });

  it.each<[string, unknown, string, RegExp]>([
    [
      'messages',
      { messages: [user(), user(), user(), user(), user()] },
      'messages',
      /`messages` has 5 entries; at most 4 are accepted/,
    ],
    ['tools', { messages: [user()], tools: [{}, {}, {}] }, 'tools', /`tools` has 3 entries; at most 2/],
    ['stop sequences', { prompt: 'x', stop: ['a', 'b', 'c'] }, 'stop', /`stop` has 3 entries/],
    ['prompt entries', { prompt: ['a', 'b', 'c', 'd'] }, 'prompt', /`prompt` has 4 entries/],
    ['token-id lists in a batch', { prompt: [[1], [2], [3], [4]] }, 'prompt', /`prompt` has 4 entries/],
    [
      'content parts of one message',
      { messages: [user(), user(parts(4))] },
      'messages[1].content',
      /`messages\[1\].content` has 4 content parts; at most 3/,
    ],
    [
      'content parts in total',
      { messages: [user(parts(3)), user(), user(parts(3))] },
      'messages[2].content',
      /more than 5 content parts in total/,
    ],
    [
      'tool calls in total',
      {
        messages: [
          { role: 'assistant', tool_calls: calls(2) },
          { role: 'assistant', tool_calls: calls(2) },
        ],
      },
      'messages[1].tool_calls',
      /more than 3 tool calls/,
    ],
    ['token ids of one prompt', { prompt: [1, 2, 3, 4, 5, 6, 7] }, 'prompt', /`prompt` has 7 token ids; at most 6/],
    [
      'token ids of a batch',
      {
        prompt: [
          [1, 2, 3],
          [4, 5],
          [6, 7],
        ],
      },
      'prompt[2]',
      /more than 6 token ids in total/,
    ],
  ])('reports too many %s with its param', (_label, body, param, message) => {
    const violation = checkGenerationLimits(body, small);
    expect(violation?.param).toBe(param);
    expect(violation?.message).toMatch(message);
  });

  it("bounds Anthropic Messages' own arrays: system blocks like a message's content, stop_sequences like stop", () => {
    expect(
      checkGenerationLimits({ system: parts(3), stop_sequences: ['a', 'b'], messages: [user()] }, small),
    ).toBeNull();
    expect(checkGenerationLimits({ system: parts(4), messages: [user()] }, small)).toEqual({
      message: '`system` has 4 content parts; at most 3 are accepted.',
      param: 'system',
    });
    expect(checkGenerationLimits({ stop_sequences: ['a', 'b', 'c'] }, small)?.param).toBe('stop_sequences');
  });

  it('reports top-level counts before per-message ones, and formats counts for people', () => {
    const body = {
      messages: Array.from({ length: 200_000 }, () => ({ role: 1 })),
      tools: Array.from({ length: 600 }, () => ({})),
    };
    expect(checkGenerationLimits(body)).toEqual({
      message: '`messages` has 200,000 entries; at most 4,096 are accepted.',
      param: 'messages',
    });
  });

  it.each<[string, unknown]>([
    ['null', null],
    ['an array', [1, 2, 3]],
    ['a string', 'x'],
    ['fields of the wrong type', { messages: 'hi', tools: 3, prompt: { a: 1 }, stop: 'x' }],
    ['messages that are not objects', { messages: [1, null, 'x', [parts(9)]] }],
    ['content that is not an array', { messages: [{ role: 'user', content: { length: 1e9 } }] }],
  ])('leaves %s to validation', (_label, body) => {
    expect(checkGenerationLimits(body, small)).toBeNull();
  });

  it('uses the proposed defaults when given no limits', () => {
    expect(
      checkGenerationLimits({ messages: Array.from({ length: DEFAULT_GENERATION_LIMITS.maxMessages }, () => user()) }),
    ).toBeNull();
    expect(
      checkGenerationLimits({ tools: Array.from({ length: DEFAULT_GENERATION_LIMITS.maxTools + 1 }, () => ({})) })
        ?.param,
    ).toBe('tools');
  });
});
