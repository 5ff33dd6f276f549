import { describe, expect, it } from 'vitest';
import { mergeCalibration } from '../state/routing-state';
import {
  CALIBRATION_BOUNDS,
  calibratedOverrides,
  CalibrationSamples,
  calibrationSamplesOf,
  MIN_CALIBRATION_SAMPLES,
} from './calibration';

const idle = { inflightAhead: 0, pendingAheadTokens: 0 };

describe('calibrationSamplesOf', () => {
  it('takes bytes per token from every response with usage, and no timing from a non-streaming one', () => {
    expect(
      calibrationSamplesOf({ textBytes: 6_144, promptTokens: 3_072, cachedTokens: 0, ttftMs: null, ...idle }, 0.07),
    ).toEqual({ bytesPerToken: 2 });
  });

  it('takes no bytes per token from a request counted in tokens (token mode), its timing still', () => {
    const samples = calibrationSamplesOf(
      { textBytes: 4_000, unit: 'tokens', promptTokens: 4_000, cachedTokens: 1_000, ttftMs: 378, ...idle },
      0.07,
    );
    expect(samples.bytesPerToken).toBeUndefined();
    expect(samples.prefillMsPerToken).toBeCloseTo(0.126, 6);
  });

  it('takes the prefill rate from a stream that started on an idle backend with enough uncached tokens', () => {
    const samples = calibrationSamplesOf(
      { textBytes: 8_000, promptTokens: 4_000, cachedTokens: 1_000, ttftMs: 378, ...idle },
      0.07,
    );
    expect(samples.prefillMsPerToken).toBeCloseTo(0.126, 6);
    expect(samples.queueMsPerRequest).toBeUndefined();
    // Too few uncached tokens: the TTFT's fixed part would dominate.
    expect(
      calibrationSamplesOf({ textBytes: 8_000, promptTokens: 4_000, cachedTokens: 3_800, ttftMs: 30, ...idle }, 0.07)
        .prefillMsPerToken,
    ).toBeUndefined();
  });

  it('takes the queue cost from a stream that started behind others, net of its prefill and the backlog ahead', () => {
    const samples = calibrationSamplesOf(
      { textBytes: 800, promptTokens: 400, cachedTokens: 0, ttftMs: 120, inflightAhead: 4, pendingAheadTokens: 600 },
      0.1,
    );
    // 120 − 0.1 × (400 + 600) = 20 ms over 4 requests.
    expect(samples.queueMsPerRequest).toBeCloseTo(5, 6);
    expect(samples.prefillMsPerToken).toBeUndefined();
  });

  it('clamps every sample into its bounds, so one outlier moves a figure by a bounded step', () => {
    const samples = calibrationSamplesOf(
      {
        textBytes: 100_000,
        promptTokens: 100,
        cachedTokens: 0,
        ttftMs: 1,
        inflightAhead: 2,
        pendingAheadTokens: 5_000,
      },
      0.5,
    );
    expect(samples.bytesPerToken).toBe(CALIBRATION_BOUNDS.bytesPerToken.max);
    expect(samples.queueMsPerRequest).toBe(CALIBRATION_BOUNDS.queueMsPerRequest.min);
  });

  it('gives no timing samples without cached tokens (the uncached part is unknown)', () => {
    expect(
      Object.keys(
        calibrationSamplesOf({ textBytes: 8_000, promptTokens: 4_000, cachedTokens: null, ttftMs: 400, ...idle }, 0.07),
      ),
    ).toEqual(['bytesPerToken']);
  });
});

describe('CalibrationSamples and the merge', () => {
  it('batches counts and sums per figure and starts afresh after take', () => {
    const samples = new CalibrationSamples();
    expect(samples.take()).toBeNull();
    samples.add({ bytesPerToken: 2 });
    samples.add({ bytesPerToken: 3, prefillMsPerToken: 0.1 });
    expect(samples.take()).toEqual({
      bytesPerToken: { samples: 2, sum: 5 },
      prefillMsPerToken: { samples: 1, sum: 0.1 },
    });
    expect(samples.isEmpty).toBe(true);
  });

  it('is a running mean up to the window, then moves by the batch share of the window', () => {
    let figure = mergeCalibration(undefined, { samples: 100, sum: 200 });
    figure = mergeCalibration(figure, { samples: 100, sum: 400 });
    expect(figure).toEqual({ value: 3, samples: 200 });
    figure = mergeCalibration(figure, { samples: 20, sum: 20 * 13 });
    expect(figure.value).toBeCloseTo(3 + 10 * (20 / 200), 9);
  });

  it('a batch larger than the window replaces the value and never overshoots it (a busy replica: 1,000 samples in a second)', () => {
    const figure = mergeCalibration({ value: 5, samples: 400 }, { samples: 1_000, sum: 1_000 * 0.5 });
    expect(figure.value).toBeCloseTo(0.5, 9);
  });

  it('overrides a configured figure only once enough samples back it', () => {
    expect(calibratedOverrides({ bytesPerToken: { value: 2, samples: MIN_CALIBRATION_SAMPLES - 1 } })).toEqual({});
    expect(
      calibratedOverrides({
        bytesPerToken: { value: 2, samples: MIN_CALIBRATION_SAMPLES },
        queueMsPerRequest: { value: 0.5, samples: 3 },
      }),
    ).toEqual({ bytesPerToken: 2 });
    // Out of range in the shared state (written by an older router, say): clamped, never a parameter error.
    expect(
      calibratedOverrides({
        queueMsPerRequest: { value: -3, samples: 500 },
        bytesPerToken: { value: 0, samples: 500 },
      }),
    ).toEqual({ queueMsPerRequest: 0, bytesPerToken: 0.5 });
  });
});
