import { describe, expect, it } from 'vitest';
import {
  addRequest,
  familyShapes,
  newEngine,
  parseSamples,
  prefixTotals,
  rawValue,
  renderDialect,
  runMixedWorkload,
  runSteps,
  tokenPrompt,
} from './metrics-test-support';

/** Reference §3 and llama.cpp tools/server: counters first, then gauges; no labels. */
const EXPECTED: Array<[string, string]> = [
  ['llamacpp:prompt_tokens_total', 'COUNTER'],
  ['llamacpp:prompt_seconds_total', 'COUNTER'],
  ['llamacpp:tokens_predicted_total', 'COUNTER'],
  ['llamacpp:tokens_predicted_seconds_total', 'COUNTER'],
  ['llamacpp:n_decode_total', 'COUNTER'],
  ['llamacpp:n_busy_slots_per_decode', 'COUNTER'],
  ['llamacpp:prompt_tokens_seconds', 'GAUGE'],
  ['llamacpp:predicted_tokens_seconds', 'GAUGE'],
  ['llamacpp:requests_processing', 'GAUGE'],
  ['llamacpp:requests_deferred', 'GAUGE'],
];

/** `%g` at precision 6: at most 6 significant digits, no trailing zeros, exponent form e±dd. */
const CPP_NUMBER = /^-?(?:\d+(?:\.\d+)?|\d(?:\.\d+)?e[+-]\d{2,})$/;

function significantDigits(value: string): number {
  return value.replace(/e.*$/, '').replace(/[-.]/g, '').replace(/^0+/, '').length;
}

describe('llama.cpp /metrics', () => {
  const workload = runMixedWorkload('v1');
  const text = renderDialect('llamacpp', workload.engine, { slots: 4 });

  it('has exactly the expected families, in order, without labels', () => {
    expect(familyShapes(text)).toEqual(new Map(EXPECTED.map(([name, type]) => [name, { type, labelNames: [] }])));
    expect(parseSamples(text).map((sample) => sample.name)).toEqual(EXPECTED.map(([name]) => name));
    expect(text).not.toContain('{');
    expect(text).toContain(
      '# HELP llamacpp:prompt_seconds_total Prompt process time\n# TYPE llamacpp:prompt_seconds_total counter\n',
    );
  });

  it('prints values like a C++ stream: integers bare, at most 6 significant digits', () => {
    for (const { name, value } of parseSamples(text)) {
      expect(value, name).toMatch(CPP_NUMBER);
      expect(significantDigits(value), `${name} ${value}`).toBeLessThanOrEqual(6);
    }
    expect(rawValue(text, 'llamacpp:n_decode_total')).toBe(String(workload.engine.stats.steps));
  });

  it('counts prompt tokens actually processed (cache hits excluded) and slot occupancy', () => {
    const totals = prefixTotals(workload.sequences);
    expect(rawValue(text, 'llamacpp:prompt_tokens_total')).toBe(String(totals.queried - totals.hit));
    expect(rawValue(text, 'llamacpp:requests_processing')).toBe('1');
    expect(rawValue(text, 'llamacpp:requests_deferred')).toBe('0');
    expect(rawValue(text, 'llamacpp:tokens_predicted_total')).toBe(String(workload.engine.stats.generationTokens));
  });

  it('formats large counts with 6 significant digits', () => {
    const engine = newEngine('v1', { numGpuBlocks: 200_000, maxModelLen: 3_000_000 });
    addRequest(engine, tokenPrompt(2_417_733, 7), 1, 'length', 0);
    runSteps(engine, 0);
    const big = renderDialect('llamacpp', engine);
    expect(big).toContain('\nllamacpp:prompt_tokens_total 2.41773e+06\n');
  });

  it('defers requests beyond the slots and the engine queue', () => {
    const engine = newEngine('v1');
    for (let i = 0; i < 6; i++) addRequest(engine, tokenPrompt(64, 200 + i), 50, 'stop', 0);
    runSteps(engine, 0, 3);
    expect(engine.runningCount).toBe(6);
    const busy = renderDialect('llamacpp', engine, { slots: 4 });
    expect(rawValue(busy, 'llamacpp:requests_processing')).toBe('4');
    expect(rawValue(busy, 'llamacpp:requests_deferred')).toBe('2');
  });
});
