import { describe, expect, it } from 'vitest';
import { Engine, type Sequence } from './engine';
import { runToIdle, traced as spec, type Trace } from './engine-test-support';
import { syntheticTokenPrompt as prompt } from '@kvroute/workloads';
import { getProfile, type EngineProfile } from './profiles';

function runOne(
  engine: Engine,
  tokens: number[],
  outputTokens = 1,
  startMs = 0,
): { trace: Trace; sequence: Sequence; endMs: number } {
  const trace: Trace = { tokens: 0 };
  const sequence = engine.add(spec(tokens, outputTokens, trace), startMs);
  const endMs = runToIdle(engine, startMs);
  return { trace, sequence, endMs };
}

describe('Engine timing on an idle worker (reference §4)', () => {
  const cases: Array<[string, number, number, number]> = [
    // profile, prompt tokens, expected cold TTFT ms, expected warm TTFT ms (reference table)
    ['a100-7b', 2048, 137, 14],
    ['a100-7b', 512, 37, 14],
    ['a100-7b', 8192, 595, 14],
    ['a100-8b', 2048, 147, 14],
    ['a100-14b', 2048, 273, 24],
    ['h100-8b', 8192, 220, 10],
    ['a100-70b-tp4', 2048, 380, 34],
  ];
  it.each(cases)('%s, %i tokens: cold and warm TTFT within ±30%% of the reference', (name, length, coldMs, warmMs) => {
    const engine = new Engine({ profile: getProfile(name), version: 'v1' });
    const tokens = prompt(length, 1);
    const cold = runOne(engine, tokens, 1, 0);
    const warm = runOne(engine, tokens, 1, cold.endMs + 1000);
    expect(cold.trace.ttftMs).toBeGreaterThan(coldMs * 0.7);
    expect(cold.trace.ttftMs).toBeLessThan(coldMs * 1.3);
    expect(warm.trace.ttftMs).toBeGreaterThan(warmMs * 0.7);
    expect(warm.trace.ttftMs).toBeLessThan(warmMs * 1.3);
    expect(warm.sequence.cachedTokens).toBe(Math.floor((length - 1) / 16) * 16);
  });
});

describe('Engine prefix cache', () => {
  it('reports hits in whole blocks and always recomputes the last prompt token', () => {
    const engine = new Engine({ profile: getProfile('a100-7b'), version: 'v1' });
    const base = prompt(640, 7);
    const first = runOne(engine, base);
    expect(first.sequence.cachedTokens).toBe(0);
    // 640 tokens repeated: 624 hit (the 40th block holds the last token, which is recomputed).
    const repeat = runOne(engine, base, 1, first.endMs);
    expect(repeat.sequence.cachedTokens).toBe(624);
    // A prompt sharing 100 tokens shares 6 full blocks.
    const partial = runOne(engine, [...base.slice(0, 100), ...prompt(300, 8)], 1, repeat.endMs);
    expect(partial.sequence.cachedTokens).toBe(96);
    expect(engine.stats.prefixHitTokens).toBe(624 + 96);
    expect(engine.stats.prefixQueryTokens).toBe(640 + 640 + 400);
  });

  it('gives growing hits to the turns of one conversation', () => {
    const engine = new Engine({ profile: getProfile('a100-7b'), version: 'v1' });
    let conversation = prompt(300, 11);
    let now = 0;
    const hits: number[] = [];
    for (let turn = 0; turn < 8; turn++) {
      const result = runOne(engine, conversation, 16, now);
      hits.push(result.sequence.cachedTokens ?? -1);
      now = result.endMs + 40;
      // Next turn: the whole conversation so far, the generated answer, and a new user message.
      conversation = [...result.sequence.tokens, ...prompt(60, 100 + turn)];
    }
    expect(hits[0]).toBe(0);
    for (let turn = 1; turn < 8; turn++) expect(hits[turn]).toBeGreaterThan(hits[turn - 1] as number);
  });

  it('evicts the least recently used prefixes when the cache fills, and the evicted prompt then misses', () => {
    const profile: EngineProfile = { ...getProfile('a100-7b'), numGpuBlocks: 1 + 64 * 4 }; // room for four 1k prompts
    const engine = new Engine({ profile, version: 'v1' });
    const first = prompt(1024, 1);
    let now = runOne(engine, first).endMs;
    expect(runOne(engine, first, 1, now).sequence.cachedTokens).toBe(1008);
    now += 1000;
    for (let other = 2; other <= 6; other++) now = runOne(engine, prompt(1024, other), 1, now).endMs;
    expect(engine.pool.evictions).toBeGreaterThan(0);
    expect(runOne(engine, first, 1, now).sequence.cachedTokens).toBe(0);
  });

  it('keeps separate caches per cache_salt', () => {
    const engine = new Engine({ profile: getProfile('a100-7b'), version: 'v1' });
    const tokens = prompt(512, 3);
    const trace: Trace = { tokens: 0 };
    engine.add(spec(tokens, 1, trace, 'tenant-a'), 0);
    runToIdle(engine);
    expect(engine.matchPrefixTokens(tokens, 'tenant-a')).toBe(496);
    expect(engine.matchPrefixTokens(tokens, 'tenant-b')).toBe(0);
    expect(engine.matchPrefixTokens(tokens)).toBe(0);
  });
});

describe('Engine scheduling and load', () => {
  it('queues concurrent cold prompts: the median TTFT of 16 is above that of 1', () => {
    const single = new Engine({ profile: getProfile('a100-7b'), version: 'v1' });
    const alone = runOne(single, prompt(2000, 1));
    const busy = new Engine({ profile: getProfile('a100-7b'), version: 'v1' });
    const traces: Trace[] = [];
    for (let i = 0; i < 16; i++) {
      const trace: Trace = { tokens: 0 };
      traces.push(trace);
      busy.add(spec(prompt(2000, 100 + i), 16, trace), 0);
    }
    runToIdle(busy);
    const ttfts = traces.map((trace) => trace.ttftMs as number).sort((a, b) => a - b);
    expect(ttfts[8]).toBeGreaterThan(3 * (alone.trace.ttftMs as number));
    expect(traces.every((trace) => trace.tokens === 16 && trace.reason === 'length')).toBe(true);
  });

  it('holds requests back when KV blocks run short, and preempts when a running sequence cannot grow', () => {
    const profile: EngineProfile = { ...getProfile('a100-7b'), numGpuBlocks: 1 + 40 };
    const engine = new Engine({ profile, version: 'v1' });
    const traces: Trace[] = [];
    for (let i = 0; i < 4; i++) {
      const trace: Trace = { tokens: 0 };
      traces.push(trace);
      engine.add(spec(prompt(150, 200 + i), 100, trace), 0);
    }
    // 4 × (150 + 100) tokens need 4 × 16 blocks > 40: someone must wait or be preempted.
    const plan = engine.planStep(10);
    expect(plan).not.toBeNull();
    runToIdle(engine, 10);
    expect(traces.every((trace) => trace.tokens === 100)).toBe(true);
    expect(engine.stats.preemptions).toBeGreaterThan(0);
    expect(engine.pool.freeCount).toBe(40);
  });

  it('frees every block when sequences finish or abort', () => {
    const engine = new Engine({ profile: getProfile('a100-7b'), version: 'v1' });
    const trace: Trace = { tokens: 0 };
    const aborted = engine.add(spec(prompt(3000, 5), 50, trace), 0);
    const plan = engine.planStep(10);
    expect(plan).not.toBeNull();
    expect(engine.pool.usage()).toBeGreaterThan(0);
    engine.abort(aborted, 11);
    engine.completeStep(plan!);
    expect(trace.reason).toBe('abort');
    expect(engine.pool.usage()).toBe(0);
    expect(engine.stats.requestSuccess.abort).toBe(1);
  });

  it('V0 runs prefill-only steps that stall running decodes', () => {
    const engine = new Engine({ profile: getProfile('a100-7b'), version: 'v0' });
    const streaming: Trace = { tokens: 0 };
    engine.add(spec(prompt(100, 1), 50, streaming), 0);
    let now = 0;
    for (let i = 0; i < 5; i++) {
      const plan = engine.planStep(Math.max(now, 3))!;
      engine.completeStep(plan);
      now = plan.startMs + plan.durationMs;
    }
    const tokensBefore = streaming.tokens;
    const newcomer: Trace = { tokens: 0 };
    engine.add(spec(prompt(4000, 2), 1, newcomer), now - 3);
    const prefillStep = engine.planStep(now)!;
    expect(prefillStep.work.map((item) => item.tokens)).toEqual([4000]);
    engine.completeStep(prefillStep);
    expect(streaming.tokens).toBe(tokensBefore);
    expect(newcomer.tokens).toBe(1);
  });
});
