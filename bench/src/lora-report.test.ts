import { seededRandom } from '@kvroute/workloads';
import { describe, expect, it } from 'vitest';
import { adapterAwareChecks, figuresOfRun, renderLoraTables, zipfSampler, type LoraRun } from './lora-report';

const runOf = (variant: LoraRun['variant'], seed: number, ttfts: number[], loads: number): LoraRun => ({
  variant,
  seed,
  samples: ttfts.map((ttftMs) => ({ ok: true, ttftMs, adapter: 'a00' })),
  wallMs: 1_000,
  adapterLoads: loads,
  kvHit: 0.5,
});

describe('bench:lora report', () => {
  it('counts adapter loads per 1,000 requests and checks the acceptance on the means over seeds', () => {
    const ttfts = (base: number) => Array.from({ length: 100 }, (_, index) => base + index);
    const runs = [
      runOf('adapter-aware', 1, ttfts(50), 10),
      runOf('adapter-blind', 1, ttfts(300), 40),
      runOf('adapter-aware', 2, ttfts(60), 20),
      runOf('adapter-blind', 2, ttfts(310), 30),
    ];
    expect(figuresOfRun(runs[0] as LoraRun).loadsPer1000).toBe(100);
    const [loads, p95] = adapterAwareChecks(runs);
    expect(loads?.passed).toBe(true);
    expect(loads?.measured).toContain('150.0 vs 350.0 per 1,000 requests (-57.1 %');
    expect(p95?.passed).toBe(true);
    // One seed's blind run better than aware: the mean decides, the seed shows it.
    const worse = adapterAwareChecks([
      runOf('adapter-aware', 1, ttfts(300), 39),
      runOf('adapter-blind', 1, ttfts(300), 40),
    ]);
    expect(worse.map((check) => check.passed)).toEqual([false, false]);
    expect(renderLoraTables(runs)).toContain('| cacheaware, adapter-aware | 200 | 0 |');
  });

  it('draws Zipf ranks: rank 0 the most often, every rank possible, shares ∝ 1/(r+1)^s', () => {
    const draw = zipfSampler(16, 1, seededRandom(7));
    const counts = new Array<number>(16).fill(0);
    for (let index = 0; index < 50_000; index++) {
      const rank = draw();
      counts[rank] = (counts[rank] ?? 0) + 1;
    }
    expect(counts.every((count) => count > 0)).toBe(true);
    const harmonic = Array.from({ length: 16 }, (_, rank) => 1 / (rank + 1)).reduce((sum, value) => sum + value, 0);
    expect((counts[0] as number) / 50_000).toBeCloseTo(1 / harmonic, 1);
    expect(counts[0] as number).toBeGreaterThan(3 * (counts[3] as number));
  });
});
