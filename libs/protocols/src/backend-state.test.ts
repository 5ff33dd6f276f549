import { describe, expect, it } from 'vitest';
import { BackendState } from './backend-state';

const state = {
  backendId: '10.0.0.1:8000',
  engine: 'vllm',
  healthy: true,
  failure: null,
  consecutiveFailures: 0,
  consecutiveSuccesses: 4,
  healthyChangedAtMs: 1_800_000_000_000,
  scrapedAtMs: 1_800_000_003_000,
  kvUsage: 0.42,
  kvCapacityTokens: 1_018_880,
  running: 3,
  waiting: 0,
  prefixCacheHitRate: null,
  preemptionsTotal: 0,
  engineStartedAtMs: 1_799_999_000_000,
  restartedAtMs: null,
  loraAdapters: { running: ['alpaca', 'sql-lora'], waiting: [], maxLoras: 2 },
};

describe('BackendState', () => {
  it('accepts a published state and keeps unknown figures as null', () => {
    expect(BackendState.parse(state)).toEqual(state);
  });

  it('rejects a usage outside [0, 1], an unknown engine or failure cause, and a missing field', () => {
    expect(BackendState.safeParse({ ...state, kvUsage: 1.5 }).success).toBe(false);
    expect(BackendState.safeParse({ ...state, engine: 'tgi' }).success).toBe(false);
    expect(BackendState.safeParse({ ...state, failure: 'dns' }).success).toBe(false);
    const { running: _running, ...withoutRunning } = state;
    expect(BackendState.safeParse(withoutRunning).success).toBe(false);
  });

  it('reads a state published before the engine start and restart fields existed as not known', () => {
    const { engineStartedAtMs: _started, restartedAtMs: _restarted, loraAdapters: _lora, ...older } = state;
    expect(BackendState.parse(older)).toEqual({
      ...state,
      engineStartedAtMs: null,
      restartedAtMs: null,
      loraAdapters: null,
    });
  });

  it('rejects a start or restart time that is not a whole ms count', () => {
    expect(BackendState.safeParse({ ...state, engineStartedAtMs: 1.5 }).success).toBe(false);
    expect(BackendState.safeParse({ ...state, restartedAtMs: -1 }).success).toBe(false);
  });

  it('keeps unknown LoRA residency as null and rejects empty or oversized names and a bad max', () => {
    expect(BackendState.parse({ ...state, loraAdapters: null }).loraAdapters).toBeNull();
    const lora = state.loraAdapters;
    expect(BackendState.safeParse({ ...state, loraAdapters: { ...lora, running: [''] } }).success).toBe(false);
    expect(BackendState.safeParse({ ...state, loraAdapters: { ...lora, waiting: ['x'.repeat(257)] } }).success).toBe(
      false,
    );
    const tooMany = Array.from({ length: 257 }, (_, i) => `a${i}`);
    expect(BackendState.safeParse({ ...state, loraAdapters: { ...lora, running: tooMany } }).success).toBe(false);
    expect(BackendState.safeParse({ ...state, loraAdapters: { ...lora, maxLoras: 1.5 } }).success).toBe(false);
    expect(
      BackendState.parse({ ...state, loraAdapters: { ...lora, maxLoras: null } }).loraAdapters?.maxLoras,
    ).toBeNull();
  });
});
