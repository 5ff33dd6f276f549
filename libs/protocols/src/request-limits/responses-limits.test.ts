import { describe, expect, it } from 'vitest';
import { DEFAULT_GENERATION_LIMITS } from './generation-limits';
import { checkResponsesLimits } from './responses-limits';

const limits = {
  ...DEFAULT_GENERATION_LIMITS,
  maxMessages: 3,
  maxTools: 2,
  maxContentPartsPerMessage: 2,
  maxContentParts: 3,
};

describe('checkResponsesLimits', () => {
  it('accepts a body within the limits, a string input, and non-objects (left to validation)', () => {
    expect(
      checkResponsesLimits(
        { input: [{ role: 'user', content: [{ type: 'input_text', text: 'a' }] }], tools: [{}] },
        limits,
      ),
    ).toBeNull();
    expect(checkResponsesLimits({ input: 'x'.repeat(10_000) }, limits)).toBeNull();
    expect(checkResponsesLimits([1, 2], limits)).toBeNull();
    expect(checkResponsesLimits(null, limits)).toBeNull();
  });

  it('refuses too many input items, tools, parts in one item and parts in all', () => {
    expect(checkResponsesLimits({ input: [{}, {}, {}, {}] }, limits)).toMatchObject({ param: 'input' });
    expect(checkResponsesLimits({ input: [], tools: [{}, {}, {}] }, limits)).toMatchObject({ param: 'tools' });
    expect(checkResponsesLimits({ input: [{ content: [{}, {}, {}] }] }, limits)).toMatchObject({
      param: 'input[0].content',
    });
    expect(checkResponsesLimits({ input: [{ content: [{}, {}] }, { content: [{}, {}] }] }, limits)).toMatchObject({
      param: 'input[1].content',
    });
  });
});
