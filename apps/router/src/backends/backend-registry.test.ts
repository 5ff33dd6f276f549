import { describe, expect, it } from 'vitest';
import { BackendRegistry, type Backend } from './backend-registry';

const options = (fetchModels: (backend: Backend) => Promise<readonly string[]>) => ({
  breakerFailureThreshold: 3,
  breakerCooldownMs: 1000,
  nowMs: () => 0,
  fetchModels,
});

describe('BackendRegistry', () => {
  it('derives ids from host:port and forms pools per model, in config order', async () => {
    const registry = new BackendRegistry(
      [
        { url: 'http://127.0.0.1:8001', weight: 1 },
        { url: 'http://127.0.0.1:8002/v1', id: 'b', models: ['m1', 'm2'], weight: 2 },
        { url: 'http://127.0.0.1:8003', weight: 1 },
      ],
      options(async (backend) => (backend.id === '127.0.0.1:8001' ? ['m1'] : ['m3'])),
    );
    await registry.refreshModels();
    expect(registry.poolFor('m1').map((backend) => backend.id)).toEqual(['127.0.0.1:8001', 'b']);
    expect(registry.poolFor('m2').map((backend) => backend.id)).toEqual(['b']);
    expect(registry.poolFor('m3').map((backend) => backend.id)).toEqual(['127.0.0.1:8003']);
    expect(registry.poolFor('nope')).toEqual([]);
    expect(registry.get('b')?.basePath).toBe('');
    expect(registry.get('b')?.info.weight).toBe(2);
  });

  it('keeps the last known models of a backend that cannot be reached', async () => {
    let reachable = true;
    const registry = new BackendRegistry([{ url: 'http://127.0.0.1:8001', weight: 1 }], options(async () => {
      if (!reachable) throw new Error('down');
      return ['m'];
    }));
    await registry.refreshModels();
    reachable = false;
    await registry.refreshModels();
    expect(registry.poolFor('m')).toHaveLength(1);
  });

  it('rejects duplicate ids', () => {
    expect(() => new BackendRegistry([{ url: 'http://a:1', weight: 1 }, { url: 'http://a:1', weight: 1 }], options(async () => []))).toThrow(/duplicate/);
  });
});
