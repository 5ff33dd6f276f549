import { describe, expect, it } from 'vitest';
import { cacheAwareCheck, figuresOfRun, meanFigures, renderPdTables, type PdRun, type PdSample } from './pd-report';

function sample(ttftMs: number, gapsMs: number[] = [10, 20], disaggregated = true): PdSample {
  return { ok: true, ttftMs, gapsMs, outputTokens: gapsMs.length + 1, disaggregated };
}

function run(variant: PdRun['variant'], seed: number, ttfts: number[], prefillHit: number | null = 0.5): PdRun {
  return {
    workload: 'conversation',
    variant,
    seed,
    samples: [
      ...ttfts.map((ttft) => sample(ttft)),
      { ok: false, ttftMs: 0, gapsMs: [], outputTokens: 0, disaggregated: false },
    ],
    wallMs: 2_000,
    kvHit: { prefill: prefillHit, decode: 0.25 },
  };
}

describe('bench:pd report', () => {
  it('figures of a run: percentiles of the answered requests only, throughput over wall time', () => {
    const figures = figuresOfRun(run('disaggregated', 1, [10, 20, 30, 40]));
    expect(figures).toMatchObject({
      requests: 5,
      failed: 1,
      split: 4,
      ttftP50: 20,
      ttftP95: 40,
      itlP50: 10,
      itlP95: 20,
    });
    expect(figures.throughput).toBe(6);
  });

  it('means over seeds, a missing side of the cache staying unknown', () => {
    const mean = meanFigures([run('aggregated', 1, [10, 10], null), run('aggregated', 2, [30, 30], null)]);
    expect(mean.ttftP50).toBe(20);
    expect(mean.kvHit).toEqual({ prefill: null, decode: 0.25 });
  });

  it('the cache-aware check passes at a 30 % cut of TTFT p50 and fails short of it', () => {
    const blind = [run('cache-blind', 1, [100, 100, 100])];
    expect(cacheAwareCheck([...blind, run('disaggregated', 1, [70, 70, 70])], 'conversation').passed).toBe(true);
    const short = cacheAwareCheck([...blind, run('disaggregated', 1, [71, 71, 71])], 'conversation');
    expect(short.passed).toBe(false);
    expect(short.measured).toBe('71 ms vs 100 ms (−29.0 %); seed 1: 71 ms vs 100 ms (−29.0 %)');
    // A loss is a +.
    expect(cacheAwareCheck([...blind, run('disaggregated', 1, [150])], 'conversation').measured).toContain('(+50.0 %)');
  });

  it('renders one table per workload with a row per variant run', () => {
    const text = renderPdTables([run('aggregated', 1, [10], null), run('disaggregated', 1, [20])]);
    expect(text).toContain('### conversation (mean of 1 seed)');
    expect(text).toMatch(/\| aggregated \(4 × both\) \| 2 \| 1 \| 1 \| 10 ms .* \| – \| 25\.0 % \|/);
    expect(text).not.toContain('cache-blind prefill');
  });
});
