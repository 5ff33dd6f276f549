import type { CalibratedParam, CalibrationBatch, LearnedCalibration } from '../state/routing-state';

/**
 * Calibrating cacheaware's cost model from what responses show, instead of trusting its defaults
 * (4 bytes per token, 0.07 ms of prefill per token, 5 ms per request in flight: guesses that were 2×,
 * 1.8× and ~10× off on the seed's workload and the simulated A100s).
 *
 * Samples, one response at a time (`calibrationSamplesOf`):
 * - bytesPerToken = routing-text bytes ÷ the engine's prompt tokens (every response that reports usage);
 * - prefillMsPerToken = TTFT ÷ uncached prompt tokens, from streams that started on an idle backend
 *   (nothing in flight, no backlog: the TTFT is the prefill) with at least MIN_PREFILL_SAMPLE_TOKENS
 *   uncached tokens (so the fixed part of a TTFT, a few ms, weighs little);
 * - queueMsPerRequest = (TTFT − prefill of its uncached tokens and of the backlog ahead) ÷ the requests
 *   in flight ahead, from streams that started behind others.
 * Each sample is clamped to CALIBRATION_BOUNDS, so one outlier moves a figure by a bounded step; the
 * store merges a replica's samples into the pool's figures (`mergeCalibration`: a running mean, then a
 * moving one over ~200 samples), and a figure is used once MIN_CALIBRATION_SAMPLES back it.
 * Non-streaming responses give no timing samples: their "first output" is the end of generation.
 */

/** The range a sample of each figure is clamped to (ms, bytes). */
export const CALIBRATION_BOUNDS: Readonly<Record<CalibratedParam, { readonly min: number; readonly max: number }>> = {
  bytesPerToken: { min: 0.5, max: 16 },
  prefillMsPerToken: { min: 0.001, max: 5 },
  queueMsPerRequest: { min: 0, max: 200 },
};

/** A learned figure replaces its configured default once this many samples back it. */
export const MIN_CALIBRATION_SAMPLES = 20;
/** Uncached prompt tokens a prefill-rate sample needs at least. */
export const MIN_PREFILL_SAMPLE_TOKENS = 512;
/** Prompt tokens a bytes-per-token sample needs at least (the chat template's few tokens dominate shorter ones). */
export const MIN_RATIO_SAMPLE_TOKENS = 64;

/** What one response showed, for calibration. */
export interface ResponseObservation {
  /** The request's routing text, bytes (its tokens in token mode). */
  readonly textBytes: number;
  /** RoutingRequest.unit: a request counted in tokens has no bytes-per-token ratio to sample. */
  readonly unit?: 'bytes' | 'tokens';
  readonly promptTokens: number;
  /** Null when the engine does not report it. */
  readonly cachedTokens: number | null;
  /** Time to first output of a stream, ms; null for non-streaming responses. */
  readonly ttftMs: number | null;
  /** Requests in flight on the backend when this one was routed (its own not counted). */
  readonly inflightAhead: number;
  /** Prefill tokens sent to the backend and not started when this one was routed. */
  readonly pendingAheadTokens: number;
}

/** The samples one response gives, given the prefill rate in use (for the queue sample). */
export function calibrationSamplesOf(
  observation: ResponseObservation,
  prefillMsPerToken: number,
): Partial<Record<CalibratedParam, number>> {
  const samples: Partial<Record<CalibratedParam, number>> = {};
  const { textBytes, promptTokens, cachedTokens, ttftMs } = observation;
  if (observation.unit !== 'tokens' && promptTokens >= MIN_RATIO_SAMPLE_TOKENS && textBytes > 0)
    samples.bytesPerToken = clampSample('bytesPerToken', textBytes / promptTokens);
  if (ttftMs === null || cachedTokens === null) return samples;
  const uncached = Math.max(0, promptTokens - cachedTokens);
  if (observation.inflightAhead === 0 && observation.pendingAheadTokens === 0) {
    if (uncached >= MIN_PREFILL_SAMPLE_TOKENS)
      samples.prefillMsPerToken = clampSample('prefillMsPerToken', ttftMs / uncached);
  } else if (observation.inflightAhead > 0) {
    const queued = ttftMs - prefillMsPerToken * (uncached + observation.pendingAheadTokens);
    samples.queueMsPerRequest = clampSample('queueMsPerRequest', queued / observation.inflightAhead);
  }
  return samples;
}

function clampSample(name: CalibratedParam, value: number): number {
  const { min, max } = CALIBRATION_BOUNDS[name];
  return Math.min(max, Math.max(min, value));
}

/** A replica's samples since its last `learn` call, per figure: count and sum. */
export class CalibrationSamples {
  private batch: Partial<Record<CalibratedParam, { samples: number; sum: number }>> = {};
  private empty = true;

  add(samples: Partial<Record<CalibratedParam, number>>): void {
    for (const [name, value] of Object.entries(samples) as [CalibratedParam, number][]) {
      const figures = (this.batch[name] ??= { samples: 0, sum: 0 });
      figures.samples++;
      figures.sum += value;
      this.empty = false;
    }
  }

  get isEmpty(): boolean {
    return this.empty;
  }

  /** The batch so far (null when empty), and a fresh one begins. */
  take(): CalibrationBatch | null {
    if (this.empty) return null;
    const batch = this.batch;
    this.batch = {};
    this.empty = true;
    return batch;
  }
}

/** The learned figures that replace their defaults (those backed by MIN_CALIBRATION_SAMPLES). */
export function calibratedOverrides(learned: LearnedCalibration): Partial<Record<CalibratedParam, number>> {
  const overrides: Partial<Record<CalibratedParam, number>> = {};
  for (const [name, figure] of Object.entries(learned) as [CalibratedParam, { value: number; samples: number }][]) {
    // Clamped again: a figure read from shared state must not put a policy parameter out of its range.
    if (figure.samples >= MIN_CALIBRATION_SAMPLES && Number.isFinite(figure.value) && name in CALIBRATION_BOUNDS)
      overrides[name] = clampSample(name, figure.value);
  }
  return overrides;
}
