import { InMemoryRoutingState } from '@kvroute/routing';
import { describe, expect, it } from 'vitest';
import { BackendRegistry } from './backend-registry';
import { createRestartForgetter } from './engine-restarts';

function aRegistry(): BackendRegistry {
  return new BackendRegistry(
    [
      { url: 'http://10.0.0.1:8000', id: 'a', models: ['m1', 'm2'], weight: 1 },
      { url: 'http://10.0.0.2:8000', id: 'b', models: ['m1'], weight: 1 },
      { url: 'http://10.0.0.3:8000', id: 'fresh', weight: 1 },
    ],
    { breakerFailureThreshold: 3, breakerCooldownMs: 1000, nowMs: () => 0, fetchModels: async () => [] },
  );
}

describe('createRestartForgetter', () => {
  it('forgets what a restarted backend was believed to cache in each of its pools, and only that backend', async () => {
    const state = new InMemoryRoutingState({ maxBlocksPerBackend: 100, blockIdleTtlMs: 0, nowMs: () => 0 });
    for (const pool of ['m1', 'm2']) {
      await state.reserve(pool, 'a', `${pool}-a`, [1, 2, 3], 0);
      await state.reserve(pool, 'b', `${pool}-b`, [1, 2], 0);
    }
    const restarts: string[] = [];
    const forget = createRestartForgetter({ registry: aRegistry(), state, recordRestart: (id) => restarts.push(id) });
    forget('a', 5_000);
    await new Promise((resolve) => setImmediate(resolve));
    expect([state.blockCount('m1', 'a'), state.blockCount('m2', 'a'), state.blockCount('m1', 'b')]).toEqual([0, 0, 2]);
    expect(restarts).toEqual(['a']);
  });

  it('forgets in every pool while the backend has no known models, and ignores backends it does not route', async () => {
    const forgotten: string[] = [];
    const restarts: string[] = [];
    const registry = aRegistry();
    const forget = createRestartForgetter({
      registry,
      state: { forgetBackend: async (pool, backendId) => void forgotten.push(`${pool}/${backendId}`) },
      recordRestart: (id) => restarts.push(id),
    });
    forget('fresh', 1);
    forget('not-ours', 2);
    expect(forgotten).toEqual(['m1/fresh', 'm2/fresh']);
    expect(restarts).toEqual(['fresh']);
  });

  it('survives a store that cannot forget right now (the next restart, or the idle TTL, takes over)', async () => {
    const forget = createRestartForgetter({
      registry: aRegistry(),
      state: { forgetBackend: async () => Promise.reject(new Error('redis away')) },
      recordRestart: () => undefined,
    });
    expect(() => forget('b', 1)).not.toThrow();
    await new Promise((resolve) => setImmediate(resolve));
  });
});
