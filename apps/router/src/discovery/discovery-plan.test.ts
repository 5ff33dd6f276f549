import { describe, expect, it } from 'vitest';
import { planDiscoveryChanges, type DiscoveryPlanInput } from './discovery-plan';

const backend = (n: number, draining = false) => ({
  id: `vllm@10.0.0.${n}:8000`,
  url: `http://10.0.0.${n}:8000`,
  draining,
});
const owned = (n: number, drained = false, role: 'both' | 'prefill' | 'decode' = 'both') => ({
  id: `vllm@10.0.0.${n}:8000`,
  url: `http://10.0.0.${n}:8000`,
  drained,
  role,
});
const plan = (input: Partial<DiscoveryPlanInput>) =>
  planDiscoveryChanges({
    current: [],
    discovered: [],
    previous: null,
    absentSinceMs: new Map(),
    nowMs: 10_000,
    removeAfterMs: 5_000,
    ...input,
  });

describe('planDiscoveryChanges', () => {
  it("carries the source's role, and replaces a backend whose role changed", () => {
    const decode = { ...backend(1), role: 'decode' as const };
    expect(plan({ current: [owned(1)], discovered: [decode] }).changes).toEqual([
      { op: 'remove', id: 'vllm@10.0.0.1:8000' },
      { op: 'add', id: 'vllm@10.0.0.1:8000', url: 'http://10.0.0.1:8000', drained: false, role: 'decode' },
    ]);
    expect(plan({ current: [owned(1, false, 'decode')], discovered: [decode] }).changes).toEqual([]);
  });

  it('adds what is new (drained if leaving) and leaves what is there as it is', () => {
    expect(plan({ current: [owned(1)], discovered: [backend(1), backend(2), backend(3, true)] }).changes).toEqual([
      { op: 'add', id: 'vllm@10.0.0.2:8000', url: 'http://10.0.0.2:8000', drained: false, role: 'both' },
      { op: 'add', id: 'vllm@10.0.0.3:8000', url: 'http://10.0.0.3:8000', drained: true, role: 'both' },
    ]);
  });

  it('drains a backend missing from the answer, then removes it once removeAfterMs has passed', () => {
    const first = plan({
      current: [owned(1), owned(2)],
      discovered: [backend(1)],
      previous: new Map([[backend(1).id, false]]),
    });
    expect(first.changes).toEqual([{ op: 'drain', id: 'vllm@10.0.0.2:8000' }]);
    expect(first.absentSinceMs.get('vllm@10.0.0.2:8000')).toBe(10_000);
    const later = plan({
      current: [owned(1), owned(2, true)],
      discovered: [backend(1)],
      absentSinceMs: first.absentSinceMs,
      nowMs: 14_999,
    });
    expect(later.changes).toEqual([]);
    const due = plan({
      current: [owned(1), owned(2, true)],
      discovered: [backend(1)],
      absentSinceMs: first.absentSinceMs,
      nowMs: 15_000,
    });
    expect(due.changes).toEqual([{ op: 'remove', id: 'vllm@10.0.0.2:8000' }]);
    expect(due.absentSinceMs.size).toBe(0);
  });

  it('an empty answer drains every owned backend', () => {
    expect(plan({ current: [owned(1), owned(2)], discovered: [] }).changes).toEqual([
      { op: 'drain', id: 'vllm@10.0.0.1:8000' },
      { op: 'drain', id: 'vllm@10.0.0.2:8000' },
    ]);
  });

  it('undrains a backend whose record came back', () => {
    expect(
      plan({
        current: [owned(2, true)],
        discovered: [backend(2)],
        previous: new Map(),
        absentSinceMs: new Map([['vllm@10.0.0.2:8000', 9_000]]),
      }).changes,
    ).toEqual([{ op: 'undrain', id: 'vllm@10.0.0.2:8000' }]);
  });

  it("an admin drain of a discovered backend holds until the source's flag changes; the first apply sets every flag", () => {
    const previous = new Map([[backend(1).id, false]]);
    expect(plan({ current: [owned(1, true)], discovered: [backend(1)], previous }).changes).toEqual([]);
    expect(plan({ current: [owned(1, true)], discovered: [backend(1)], previous: null }).changes).toEqual([
      { op: 'undrain', id: 'vllm@10.0.0.1:8000' },
    ]);
    // Terminating now: drained by the source (already drained here: nothing to do), and undrained when it is ready again.
    expect(plan({ current: [owned(1)], discovered: [backend(1, true)], previous }).changes).toEqual([
      { op: 'drain', id: 'vllm@10.0.0.1:8000' },
    ]);
  });

  it('replaces a backend whose URL changed (another scheme)', () => {
    const moved = { ...backend(1), url: 'https://10.0.0.1:8000' };
    expect(plan({ current: [owned(1)], discovered: [moved] }).changes).toEqual([
      { op: 'remove', id: 'vllm@10.0.0.1:8000' },
      { op: 'add', id: 'vllm@10.0.0.1:8000', url: 'https://10.0.0.1:8000', drained: false, role: 'both' },
    ]);
  });
});
