import { describe, expect, it } from 'vitest';
import { seededRandom } from '@kvroute/workloads';
import { eventsToJsonl } from './events';
import type { PoissonOptions } from './poisson';
import { generatePoisson, sampleLength } from './poisson';

const OPTIONS: PoissonOptions = {
  seed: 7,
  ratePerS: 20,
  count: 2000,
  poolSize: 4,
  prefixTokens: { kind: 'fixed', value: 256 },
  reuseRatio: 0.6,
  promptTokens: { kind: 'uniform', min: 300, max: 600 },
  outputTokens: { kind: 'fixed', value: 32 },
};

describe('poisson', () => {
  it('is deterministic from the seed', () => {
    const trace = eventsToJsonl(generatePoisson(OPTIONS).events);
    expect(eventsToJsonl(generatePoisson(OPTIONS).events)).toBe(trace);
    expect(eventsToJsonl(generatePoisson({ ...OPTIONS, seed: 8 }).events)).not.toBe(trace);
  });

  it('arrives open loop with exponential gaps at the rate', () => {
    const { events } = generatePoisson(OPTIONS);
    expect(events).toHaveLength(2000);
    expect(events[0]?.atMs).toBe(0);
    const gaps = events.slice(1).map((event, i) => event.atMs - (events[i]?.atMs ?? 0));
    expect(gaps.every((gap) => gap >= 0)).toBe(true);
    const meanGap = gaps.reduce((a, b) => a + b, 0) / gaps.length;
    expect(meanGap).toBeGreaterThan(45);
    expect(meanGap).toBeLessThan(55);
    // Exponential: the share of gaps below the mean is 1 − 1/e ≈ 0.63.
    expect(gaps.filter((gap) => gap < 50).length / gaps.length).toBeCloseTo(0.63, 1);
  });

  it('reuses pool prefixes at the reuse ratio, byte for byte, and fresh prefixes are unshared', () => {
    const { events, prefixOf } = generatePoisson(OPTIONS);
    const reused = prefixOf.filter((p) => p >= 0).length / prefixOf.length;
    expect(reused).toBeGreaterThan(0.56);
    expect(reused).toBeLessThan(0.64);
    const heads = new Map<number, Set<string>>();
    const fresh = new Set<string>();
    events.forEach((event, i) => {
      const head = event.prompt.slice(0, 1024);
      const prefix = prefixOf[i] ?? -1;
      if (prefix < 0) fresh.add(head);
      else heads.set(prefix, (heads.get(prefix) ?? new Set()).add(head));
    });
    expect([...heads.keys()].sort()).toEqual([0, 1, 2, 3]);
    expect([...heads.values()].every((set) => set.size === 1)).toBe(true);
    expect(new Set([...heads.values()].flatMap((set) => [...set])).size).toBe(4);
    expect(fresh.size).toBe(prefixOf.filter((p) => p < 0).length);
    // After the prefix, every prompt has its own suffix.
    expect(new Set(events.map((event) => event.prompt.slice(1024, 1100))).size).toBe(events.length);
  });

  it('draws prompt and output lengths from the distributions (4-byte word tokens)', () => {
    const { events } = generatePoisson({
      ...OPTIONS,
      count: 300,
      promptTokens: { kind: 'uniform', min: 100, max: 400 },
    });
    for (const event of events) {
      expect(event.prompt.length % 4).toBe(0);
      expect(event.prompt.length / 4).toBeGreaterThanOrEqual(100);
      expect(event.prompt.length / 4).toBeLessThanOrEqual(400);
      expect(event.maxTokens).toBe(32);
    }
    // A prompt shorter than the prefix is the prefix cut short.
    const short = generatePoisson({ ...OPTIONS, count: 50, reuseRatio: 1, promptTokens: { kind: 'fixed', value: 10 } });
    expect(short.events.every((event) => event.prompt.length === 40)).toBe(true);
    expect(() => generatePoisson({ ...OPTIONS, ratePerS: 0 })).toThrow(RangeError);
  });

  it('samples lengths: fixed, uniform within bounds, log-normal around its median and clamped', () => {
    const random = seededRandom(1);
    expect(sampleLength({ kind: 'fixed', value: 5 }, random)).toBe(5);
    const uniform = Array.from({ length: 1000 }, () => sampleLength({ kind: 'uniform', min: 3, max: 6 }, random));
    expect(new Set(uniform)).toEqual(new Set([3, 4, 5, 6]));
    const lognormal = Array.from({ length: 4000 }, () =>
      sampleLength({ kind: 'lognormal', median: 1000, sigma: 0.8, max: 5000 }, random),
    ).sort((a, b) => a - b);
    const median = lognormal[2000] ?? 0;
    expect(median).toBeGreaterThan(900);
    expect(median).toBeLessThan(1100);
    expect(lognormal.at(-1)).toBe(5000);
    expect(lognormal[0]).toBeGreaterThanOrEqual(1);
  });
});
