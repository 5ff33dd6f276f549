import { describe, expect, it } from 'vitest';
import { checkPrediction } from './prediction-accuracy';

// 256-byte blocks, 10,240 routing bytes for a 2,560-token prompt: 4 bytes a token, 64 tokens a block.
const prediction = (matchBlocks: number) => ({ matchBlocks, blockSizeBytes: 256, textBytes: 10_240 });

describe('checkPrediction', () => {
  it('confirms a match within a routing block and an engine block of what the engine found', () => {
    expect(checkPrediction(prediction(20), { promptTokens: 2_560, cachedTokens: 1_280 })).toEqual({
      outcome: 'confirmed',
      predictedTokens: 1_280,
      observedTokens: 1_280,
      confirmedTokens: 1_280,
    });
    expect(checkPrediction(prediction(20), { promptTokens: 2_560, cachedTokens: 1_200 }).outcome).toBe('confirmed');
    expect(checkPrediction(prediction(0), { promptTokens: 2_560, cachedTokens: 0 }).outcome).toBe('confirmed');
  });

  it('tells an engine that held less (overpredicted) from one that held more (underpredicted)', () => {
    expect(checkPrediction(prediction(30), { promptTokens: 2_560, cachedTokens: 0 })).toEqual({
      outcome: 'overpredicted',
      predictedTokens: 1_920,
      observedTokens: 0,
      confirmedTokens: 0,
    });
    expect(checkPrediction(prediction(0), { promptTokens: 2_560, cachedTokens: 2_048 })).toEqual({
      outcome: 'underpredicted',
      predictedTokens: 0,
      observedTokens: 2_048,
      confirmedTokens: 0,
    });
  });

  it('is unverified when the engine reports no cached tokens, or no usage', () => {
    expect(checkPrediction(prediction(5), { promptTokens: 2_560, cachedTokens: null }).outcome).toBe('unverified');
    expect(checkPrediction(prediction(5), null)).toEqual({
      outcome: 'unverified',
      predictedTokens: 0,
      observedTokens: 0,
      confirmedTokens: 0,
    });
  });
});
