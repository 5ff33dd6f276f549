import { describe, expect, it } from 'vitest';
import {
  type AdmissionSample,
  demandShare,
  fairShare,
  figuresByWindow,
  figuresOf,
  noisyNeighbourChecks,
  overloadChecks,
  percentile,
  renderWindowTable,
} from './admission-report';

const served = (window: string, load: AdmissionSample['load'], ttftMs: number, tokens = 100): AdmissionSample => ({
  load,
  window,
  atMs: 0,
  status: 200,
  ttftMs,
  e2eMs: ttftMs + 500,
  tokens,
  retryAfter: false,
});
const shed = (window: string, e2eMs: number, retryAfter = true): AdmissionSample => ({
  load: 'load',
  window,
  atMs: 0,
  status: 429,
  e2eMs,
  tokens: 0,
  retryAfter,
});

describe('admission report', () => {
  it('takes nearest-rank percentiles', () => {
    expect(percentile([], 99)).toBeNull();
    expect(percentile([5, 1, 3], 50)).toBe(3);
    expect(
      percentile(
        Array.from({ length: 100 }, (_, i) => i + 1),
        99,
      ),
    ).toBe(99);
  });

  it('counts served, shed and failed apart, and tokens only of served requests', () => {
    const figures = figuresOf([
      served('w', 'load', 100, 30),
      shed('w', 4),
      shed('w', 8, false),
      { ...shed('w', 2), status: 0 },
    ]);
    expect(figures).toMatchObject({ sent: 4, served: 1, shed: 2, failed: 1, tokens: 30, shedWithoutRetryAfter: 1 });
    expect(figures.shedMaxMs).toBe(8);
  });

  it('gives the noisy tenant what the steady one leaves (max-min), never less than its weight', () => {
    expect(fairShare(1, 1, 0.4)).toBeCloseTo(0.6);
    expect(fairShare(1, 1, 0.9)).toBeCloseTo(0.5);
    expect(fairShare(3, 1, 0.1)).toBeCloseTo(0.9);
  });

  it('takes the steady tenant’s demand from what it sent, at the tokens its served requests used', () => {
    const steady = figuresOf([served('c', 'steady', 100, 50), served('c', 'steady', 100, 50), shed('c', 3)]);
    // 3 sent × 50 tokens = 150 asked, of 300 served in all.
    expect(demandShare(steady, 300)).toBeCloseTo(0.5);
    expect(demandShare(figuresOf([]), 300)).toBe(0);
  });

  it('fails the noisy-neighbour checks on an unfair or slow contended window, passes a fair one', () => {
    const alone = figuresOf(Array.from({ length: 100 }, () => served('a', 'steady', 100)));
    const fair = noisyNeighbourChecks({
      alone,
      contended: {
        steady: figuresOf(Array.from({ length: 100 }, () => served('c', 'steady', 120, 40))),
        noisy: figuresOf(Array.from({ length: 60 }, () => served('c', 'noisy', 0, 100))),
      },
      noisyFairShare: 0.6,
    });
    expect(fair.map((check) => check.passed)).toEqual([true, true, true]);
    const unfair = noisyNeighbourChecks({
      alone,
      contended: {
        steady: figuresOf([...Array.from({ length: 10 }, () => served('c', 'steady', 300, 10)), shed('c', 5)]),
        noisy: figuresOf(Array.from({ length: 60 }, () => served('c', 'noisy', 0, 100))),
      },
      noisyFairShare: 0.6,
    });
    expect(unfair.map((check) => check.passed)).toEqual([false, false, false]);
  });

  it('fails overload checks on slow 429s, waits past the deadline or a queue over its bound', () => {
    const unloaded = figuresOf(Array.from({ length: 100 }, () => served('u', 'load', 100)));
    const good = figuresOf([...Array.from({ length: 100 }, () => served('o', 'load', 140)), shed('o', 3)]);
    const base = { unloaded, overloaded: good, waitsPastDeadline: 0, maxQueued: 5, queueBound: 10 };
    expect(overloadChecks(base).map((check) => check.passed)).toEqual([true, true, true, true, true]);
    const failing = (input: typeof base): string[] =>
      overloadChecks(input)
        .filter((check) => !check.passed)
        .map((check) => check.name);
    const slow = figuresOf([...Array.from({ length: 100 }, () => served('o', 'load', 140)), shed('o', 30)]);
    expect(overloadChecks({ ...base, overloaded: slow }).find((c) => c.name.includes('429'))?.passed).toBe(false);
    expect(failing({ ...base, waitsPastDeadline: 1 })).toEqual(['no admitted request waited past its deadline']);
    expect(failing({ ...base, maxQueued: 11 })).toEqual(['the queue stays within its bound']);
  });

  it('renders one row per window and load with its token share', () => {
    const table = figuresByWindow([served('w', 'noisy', 0, 300), served('w', 'steady', 50, 100)], ['w']);
    const text = renderWindowTable(table, (window) => `window ${window}`);
    expect(text).toContain('| window w | noisy | 1 | 1 | 0 | 0 |');
    expect(text).toContain('| 75.0 % |');
    expect(text).toContain('| 25.0 % |');
  });
});
