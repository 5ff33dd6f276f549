import { describe, expect, it } from 'vitest';
import { compareBySource, selfTimeBySource, shortSource, type CpuProfile } from './cpu-profile-by-source';

/** A profile of four frames: two in the bundle (lines 10 and 20), one native, and idle. */
function profileOf(samples: number[], deltas: number[]): CpuProfile {
  const frame = (functionName: string, url: string, lineNumber: number) => ({
    functionName,
    url,
    lineNumber,
    columnNumber: 4,
  });
  return {
    nodes: [
      { id: 1, callFrame: frame('(root)', '', -1) },
      { id: 2, callFrame: frame('send2', 'file:///x/dist/router.mjs', 9) },
      { id: 3, callFrame: frame('parse4', 'file:///x/dist/router.mjs', 19) },
      { id: 4, callFrame: frame('writev', '', -1) },
      { id: 5, callFrame: frame('(idle)', '', -1) },
    ],
    samples,
    timeDeltas: deltas,
  };
}

/** Bundle line 10 is the store's route call, 20 undici's; anything else has no mapping. */
const sourceOf = (line: number, column: number): string | null => {
  expect(column).toBe(4);
  if (line === 10) return '../../libs/redis-store/src/route-call.ts';
  if (line === 20) return '../../node_modules/undici/lib/dispatcher/client-h1.js';
  return null;
};

describe('selfTimeBySource', () => {
  it('charges each sample the time to the next one, per original source, idle left out', () => {
    // Samples: route call (10 µs until the next), undici (20), writev (30), idle (40), route call (last: no next).
    const profile = profileOf([2, 3, 4, 5, 2], [0, 10, 20, 30, 40]);
    const result = selfTimeBySource(profile, 'router.mjs', sourceOf);
    expect(Object.fromEntries(result.bySource)).toEqual({
      'libs/redis-store/src/route-call.ts': 10,
      'node_modules/undici': 20,
      '[native] writev': 30,
    });
    expect(result.busyUs).toBe(60);
  });

  it('names what the map cannot place, and frames of other scripts by function', () => {
    const profile = profileOf([2, 2], [0, 5]);
    const result = selfTimeBySource(profile, 'other.mjs', () => null);
    expect(Object.fromEntries(result.bySource)).toEqual({ '[native] send2': 5 });
    const unmapped = selfTimeBySource(profile, 'router.mjs', () => null);
    expect(Object.fromEntries(unmapped.bySource)).toEqual({ '(unmapped)': 5 });
  });
});

describe('shortSource', () => {
  it('keeps a package name, scoped or not, and a path from apps, libs or bench', () => {
    expect(shortSource('../../node_modules/@scope/name/lib/a.js')).toBe('node_modules/@scope/name');
    expect(shortSource('../../node_modules/a/node_modules/b/index.js')).toBe('node_modules/b');
    expect(shortSource('../../apps/router/src/main.ts')).toBe('apps/router/src/main.ts');
    expect(shortSource('libs/routing/src/x.ts')).toBe('libs/routing/src/x.ts');
    expect(shortSource('node:events')).toBe('node:events');
  });
});

describe('compareBySource', () => {
  it('lists every source of either side, the largest change first, in ms', () => {
    const before = {
      busyUs: 0,
      bySource: new Map([
        ['a', 5_000],
        ['b', 1_000],
      ]),
    };
    const after = {
      busyUs: 0,
      bySource: new Map([
        ['a', 4_000],
        ['c', 3_000],
      ]),
    };
    expect(compareBySource(before, after)).toEqual([
      { source: 'c', beforeMs: 0, afterMs: 3, changeMs: 3 },
      { source: 'a', beforeMs: 5, afterMs: 4, changeMs: -1 },
      { source: 'b', beforeMs: 1, afterMs: 0, changeMs: -1 },
    ]);
  });
});
