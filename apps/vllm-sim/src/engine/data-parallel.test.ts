import { describe, expect, it } from 'vitest';
import { DataParallelRanks, parseRankHeader } from './data-parallel';
import { Engine } from './engine';
import { EngineLoop, type LoopClock } from './engine-loop';
import { traced } from './engine-test-support';
import { getProfile } from './profiles';

/** A clock whose timers never fire: the engines only queue what is submitted. */
const frozenClock: LoopClock = { nowMs: () => 0, schedule: () => () => {} };

function ranks(size: number): DataParallelRanks {
  const loops = Array.from(
    { length: size },
    () => new EngineLoop(new Engine({ profile: getProfile('a100-7b'), version: 'v1' }), frozenClock, 1),
  );
  return new DataParallelRanks(loops);
}

describe('data-parallel ranks', () => {
  it('puts each sequence on argmin(4 · waiting + running), the lowest rank first on ties', () => {
    const group = ranks(3);
    const placed = Array.from({ length: 7 }, () => group.submit(traced([1, 2, 3], 1, { tokens: 0 })));
    expect(group.loops.map((loop) => loop.engine.waitingCount)).toEqual([3, 2, 2]);
    // Running counts one, waiting four: one running sequence weighs less than one waiting.
    const engine0 = group.loop(0).engine;
    const plan = engine0.planStep(10);
    expect(plan).not.toBeNull();
    expect([engine0.waitingCount, engine0.runningCount]).toEqual([0, 3]);
    // Scores now 3, 8, 8.
    expect(group.pickRank()).toBe(0);
    group.abort(placed[0] as NonNullable<(typeof placed)[0]>);
    expect(engine0.runningCount).toBe(2);
  });

  it('parses the header as Python int() does and refuses ranks outside [0, size)', () => {
    expect([' 3 ', '+2', '1_0', '-1', '0x1', '1.0', '', undefined].map((value) => parseRankHeader(value))).toEqual([
      3,
      2,
      10,
      -1,
      null,
      null,
      null,
      null,
    ]);
    const group = ranks(2);
    expect(group.runnerFor(undefined)).toBe(group);
    expect(group.runnerFor('1')).toBe(group.loop(1));
    expect(() => group.runnerFor('2')).toThrow('data_parallel_rank 2 is out of range [0, 2).');
    const single = ranks(1);
    expect(single.runnerFor(undefined)).toBe(single.loop(0));
  });
});
