import { syntheticTokenPrompt as prompt } from '@kvroute/workloads';
import { describe, expect, it } from 'vitest';
import { Engine, type CacheAt, type EngineVersion } from './engine';
import { addTraced, runToIdle } from './engine-test-support';
import { getProfile } from './profiles';

/**
 * When a computed block becomes a hit for other requests (`cacheAt`, README "Cache timing").
 * `schedule` (vLLM V1: `allocate_slots` → `cache_blocks`) registers the full blocks a request will
 * compute in a step when the step is scheduled; `step-end` (the sim before) when the step ends.
 * The a100-7b profile schedules at most 2,048 tokens per step (max_num_batched_tokens).
 */

function engineWith(cacheAt: CacheAt, version: EngineVersion = 'v1', profileName = 'a100-7b'): Engine {
  return new Engine({ profile: getProfile(profileName), version, cacheAt });
}

describe('cacheAt: a sibling scheduled in the same step as the chunk that computes its prefix', () => {
  // Two requests over one 1,200-token prefix (75 whole blocks) that arrive together: both fit in
  // one step, the first one's prefill is a single chunk, the sibling is admitted right after it.
  const shared = prompt(1200, 1);
  const first = [...shared, ...prompt(40, 2)];
  const sibling = [...shared, ...prompt(40, 3)];

  it('schedule: hits the blocks the first request computes in that step, and gets its first token with it', () => {
    const engine = engineWith('schedule');
    const a = addTraced(engine, first, 0);
    const b = addTraced(engine, sibling, 0);
    const plan = engine.planStep(3)!;
    expect(plan.work.map((item) => item.tokens)).toEqual([1240, 40]);
    expect(b.sequence.cachedTokens).toBe(1200);
    engine.completeStep(plan);
    expect(a.trace.firstTokenAtMs).toBe(plan.startMs + plan.durationMs);
    expect(b.trace.firstTokenAtMs).toBe(a.trace.firstTokenAtMs);
  });

  it('step-end: misses them, prefills the whole prompt itself and gets its first token a step later', () => {
    const engine = engineWith('step-end');
    const a = addTraced(engine, first, 0);
    const b = addTraced(engine, sibling, 0);
    const plan = engine.planStep(3)!;
    expect(plan.work.map((item) => item.tokens)).toEqual([1240, 2048 - 1240]);
    expect(b.sequence.cachedTokens).toBe(0);
    runToIdle(engine, 3);
    expect(b.trace.firstTokenAtMs).toBeGreaterThan(a.trace.firstTokenAtMs as number);
    expect(engine.stats.prefixHitTokens).toBe(0);
  });
});

describe("cacheAt: a sibling that arrives during the first request's first chunk", () => {
  // The first request's 5,000-token prompt takes three steps at 2,048 per step (2,048 + 2,048 + 904);
  // the sibling (the same 4,960-token prefix, 310 blocks) arrives during step 1 and is admitted in
  // step 3 with the budget the first one leaves, before the first one's prefill has ended.
  const shared = prompt(4960, 4);
  const first = [...shared, ...prompt(40, 5)];
  const sibling = [...shared, ...prompt(40, 6)];

  function siblingHit(cacheAt: CacheAt): { hit: number | null; prefillEndedBeforeSibling: boolean; steps: number[][] } {
    const engine = engineWith(cacheAt);
    const a = addTraced(engine, first, 0);
    let b: ReturnType<typeof addTraced> | null = null;
    let now = 3;
    const steps: number[][] = [];
    for (let step = 1; step <= 3; step++) {
      const plan = engine.planStep(now)!;
      steps.push(plan.work.map((item) => item.tokens));
      engine.completeStep(plan);
      if (step === 1) b = addTraced(engine, sibling, plan.startMs + 1);
      now = plan.startMs + plan.durationMs;
    }
    const admittedAt = b?.sequence.admittedAtMs as number;
    return {
      hit: b?.sequence.cachedTokens ?? null,
      prefillEndedBeforeSibling: (a.trace.firstTokenAtMs ?? Infinity) <= admittedAt,
      steps,
    };
  }

  it('schedule: hits the whole shared prefix, the chunk being computed in its own step included', () => {
    const result = siblingHit('schedule');
    expect(result.steps).toEqual([[2048], [2048], [904, 40]]);
    expect(result.hit).toBe(4960);
    expect(result.prefillEndedBeforeSibling).toBe(false);
  });

  it('step-end: hits only the chunks whose steps have ended (two of three)', () => {
    const result = siblingHit('step-end');
    expect(result.steps).toEqual([[2048], [2048], [904, 5000 - 4096]]);
    expect(result.hit).toBe(4096);
    expect(result.prefillEndedBeforeSibling).toBe(false);
  });
});

describe('cacheAt: a 6k-token prefix under a 2,048-token step budget', () => {
  // 6,010 tokens: 375 whole blocks (6,000 tokens) and a partial one. The oracle asks with a longer
  // prompt over the same prefix, so its own last-token cap never binds.
  const tokens = prompt(6010, 7);
  const probe = [...tokens, ...prompt(100, 8)];

  function hittableAfterEachPlanAndStep(cacheAt: CacheAt): {
    afterPlan: number[];
    afterStep: number[];
    firstTokenStep: number;
  } {
    const engine = engineWith(cacheAt);
    const a = addTraced(engine, tokens, 0, 4);
    const afterPlan: number[] = [];
    const afterStep: number[] = [];
    let firstTokenStep = -1;
    let now = 3;
    for (let step = 1; step <= 3; step++) {
      const plan = engine.planStep(now)!;
      afterPlan.push(engine.matchPrefixTokens(probe));
      engine.completeStep(plan);
      afterStep.push(engine.matchPrefixTokens(probe));
      if (firstTokenStep === -1 && a.trace.firstTokenAtMs !== undefined) firstTokenStep = step;
      now = plan.startMs + plan.durationMs;
    }
    return { afterPlan, afterStep, firstTokenStep };
  }

  it("schedule: hittable chunk by chunk as each step is scheduled, capped at the prompt's whole blocks", () => {
    const result = hittableAfterEachPlanAndStep('schedule');
    expect(result.afterPlan).toEqual([2048, 4096, 6000]);
    expect(result.afterStep).toEqual([2048, 4096, 6000]);
    // Hittable before the prefill ends: its first token comes at the end of step 3.
    expect(result.firstTokenStep).toBe(3);
  });

  it('step-end: each chunk hittable only once its step has ended', () => {
    const result = hittableAfterEachPlanAndStep('step-end');
    expect(result.afterPlan).toEqual([0, 2048, 4096]);
    expect(result.afterStep).toEqual([2048, 4096, 6000]);
    expect(result.firstTokenStep).toBe(3);
  });
});

describe('cacheAt: step-end keeps the engine as it was', () => {
  // A burst of 12 requests over one 3,100-token system prompt (like seed-cloud's), a100-14b, V1.
  // The expected figures are what the engine gave before cacheAt existed (commit 6defe8a).
  function burst(cacheAt: CacheAt): {
    cached: Array<number | null>;
    ttftMs: number[];
    steps: number;
    hitTokens: number;
  } {
    const engine = engineWith(cacheAt, 'v1', 'a100-14b');
    const system = prompt(3100, 1);
    const arrivals = [0, 1, 7, 15, 30, 60, 90, 140, 200, 260, 400, 405];
    const requests = arrivals.map((at, i) =>
      addTraced(engine, [...system, ...prompt(50 + 7 * i, 100 + i)], at, 20 + (i % 3) * 10),
    );
    runToIdle(engine);
    return {
      cached: requests.map((request) => request.sequence.cachedTokens),
      ttftMs: requests.map((request) => request.trace.ttftMs as number),
      steps: engine.stats.steps,
      hitTokens: engine.stats.prefixHitTokens,
    };
  }

  it('step-end reproduces the earlier engine: the second request hits only the first chunk', () => {
    const result = burst('step-end');
    expect(result.cached).toEqual([0, 2048, ...Array<number>(10).fill(3088)]);
    const before = [
      559.296, 735.964, 729.964, 721.964, 706.964, 676.964, 646.964, 596.964, 536.964, 476.964, 336.964, 331.964,
    ];
    result.ttftMs.forEach((ttft, i) => expect(ttft).toBeCloseTo(before[i] as number, 2));
    expect(result.steps).toBe(42);
    expect(result.hitTokens).toBe(32_928);
  });

  it('schedule: the second request hits the whole prompt, and everyone queued behind it starts sooner', () => {
    const stepEnd = burst('step-end');
    const schedule = burst('schedule');
    expect(schedule.cached).toEqual([0, ...Array<number>(11).fill(3088)]);
    expect(schedule.hitTokens).toBe(stepEnd.hitTokens + (3088 - 2048));
    for (let i = 1; i < 12; i++) expect(schedule.ttftMs[i]).toBeLessThan(stepEnd.ttftMs[i] as number);
  });
});

describe('cacheAt with the V0 scheduler (vLLM 0.6: mark_blocks_as_computed after the scheduling pass)', () => {
  it("registers a prefill step's blocks once the pass is planned, with no hits inside the pass", () => {
    for (const cacheAt of ['schedule', 'step-end'] as const) {
      const engine = engineWith(cacheAt, 'v0');
      const shared = prompt(800, 9);
      addTraced(engine, [...shared, ...prompt(20, 10)], 0);
      const b = addTraced(engine, [...shared, ...prompt(20, 11)], 0);
      const plan = engine.planStep(3)!;
      expect(plan.work.map((item) => item.tokens)).toEqual([820, 820]);
      expect(b.sequence.cachedTokens).toBe(0);
      expect(engine.matchPrefixTokens([...shared, ...prompt(20, 12)])).toBe(cacheAt === 'schedule' ? 800 : 0);
      engine.completeStep(plan);
      expect(engine.matchPrefixTokens([...shared, ...prompt(20, 12)])).toBe(800);
    }
  });
});
