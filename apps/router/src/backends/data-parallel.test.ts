import { describe, expect, it } from 'vitest';
import { BackendConfig } from '../config';
import { BackendRegistry, type Backend } from './backend-registry';
import { ranksOf, sameDataParallel } from './data-parallel';

const options = {
  breakerFailureThreshold: 3,
  breakerCooldownMs: 1000,
  nowMs: () => 0,
  fetchModels: async () => ['m'],
};
const ranks = (backends: readonly Backend[]) =>
  backends.map((backend) => [backend.id, backend.engineId, backend.dataParallelRank?.header ?? null]);

describe('data-parallel backends: one backend per engine rank', () => {
  it('routes a URL with 4 ranks as 4 backends named by global rank, the header carrying it (internal LB)', async () => {
    const registry = new BackendRegistry(
      [
        {
          url: 'http://127.0.0.1:8001',
          id: 'dp',
          models: ['m'],
          weight: 1,
          dataParallel: { size: 4, startRank: 0, hybridLb: false },
        },
        { url: 'http://127.0.0.1:8002', id: 'one', models: ['m'], weight: 1 },
      ],
      options,
    );
    expect(ranks(registry.poolFor('m'))).toEqual([
      ['dp@0', 'dp', 0],
      ['dp@1', 'dp', 1],
      ['dp@2', 'dp', 2],
      ['dp@3', 'dp', 3],
      ['one', 'one', null],
    ]);
    // Every rank is its own engine: its own circuit.
    const [first, second] = registry.poolFor('m');
    expect(first?.breaker).not.toBe(second?.breaker);
    expect(first?.origin).toBe(second?.origin);
  });

  it('sends the local rank under hybrid LB, and names ranks by their global rank', () => {
    expect(ranksOf({ size: 2, startRank: 4, hybridLb: true })).toEqual([
      { global: 4, header: 0 },
      { global: 5, header: 1 },
    ]);
    expect(ranksOf({ size: 2, startRank: 4, hybridLb: false })?.map((rank) => rank.header)).toEqual([4, 5]);
    expect(ranksOf({ size: 1, startRank: 0, hybridLb: false })).toBe(null);
    expect(
      sameDataParallel({ size: 2, startRank: 2, hybridLb: false }, { size: 2, startRank: 2, hybridLb: true }),
    ).toBe(false);
    // From rank 0 the local and the global rank are the same: routed the same.
    expect(
      sameDataParallel({ size: 2, startRank: 0, hybridLb: false }, { size: 2, startRank: 0, hybridLb: true }),
    ).toBe(true);
    expect(sameDataParallel(undefined, { size: 1, startRank: 0, hybridLb: false })).toBe(true);
  });

  it('drains, removes and replaces an engine with all its ranks, by the engine id', () => {
    const dataParallel = { size: 3, startRank: 0, hybridLb: false };
    const registry = new BackendRegistry([], options);
    expect(registry.add({ url: 'http://h:1', id: 'e', models: ['m'], weight: 1, dataParallel })).toHaveLength(3);
    expect(() => registry.add({ url: 'http://h:2', id: 'e@1', models: ['m'], weight: 1 })).toThrow(/duplicate/);
    expect(registry.setDrained('e', true)).toBe(true);
    expect(registry.poolFor('m')).toEqual([]);
    expect(registry.setDrained('e@2', false)).toBe(true);
    expect(registry.poolFor('m').map((backend) => backend.id)).toEqual(['e@2']);
    expect(registry.remove('e')).toBe(true);
    expect(registry.backends).toEqual([]);

    registry.replaceAll([
      { spec: { url: 'http://h:1', id: 'e', models: ['m'], weight: 1, dataParallel }, drained: false },
    ]);
    const before = registry.poolFor('m');
    expect(before.map((backend) => backend.id)).toEqual(['e@0', 'e@1', 'e@2']);
    // The same set again keeps the rank objects (and their circuits); two ranks fewer drops them.
    registry.replaceAll([
      { spec: { url: 'http://h:1', id: 'e', models: ['m'], weight: 1, dataParallel }, drained: false },
    ]);
    expect(registry.poolFor('m')).toEqual(before);
    registry.replaceAll([
      {
        spec: { url: 'http://h:1', id: 'e', models: ['m'], weight: 1, dataParallel: { ...dataParallel, size: 1 } },
        drained: false,
      },
    ]);
    expect(registry.poolFor('m').map((backend) => backend.id)).toEqual(['e']);
  });
});

describe('backend ids and rank ids', () => {
  it('refuses a configured or added id that names a rank, so an engine and a rank can never share one', () => {
    expect(BackendConfig.safeParse({ url: 'http://h:1', id: 'gpu@0' }).success).toBe(false);
    expect(BackendConfig.safeParse({ url: 'http://h:1', id: 'gpu@a' }).success).toBe(true);
  });
});
