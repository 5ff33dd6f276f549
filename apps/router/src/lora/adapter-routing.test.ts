import { describe, expect, it } from 'vitest';
import type { Backend } from '../backends/backend-registry';
import type { ParsedRequest } from '../pipeline/parse';
import { AdapterRouting, waitOf, type AdapterResidency } from './adapter-routing';

const PRICES = { loadMs: 200, slotWaitMs: 400, recentMs: 2_000 };
const backendOf = (id: string) => ({ id, engineId: id }) as unknown as Backend;
const parsedOf = (model: string) =>
  ({ model, routingRequest: { model, blockHashes: [1, 2], textBytes: 100 } }) as unknown as ParsedRequest;

describe('LoRA adapter waits', () => {
  it('orders backends: running, a free slot, waiting, full; an engine that does not say ranks as a free slot', () => {
    const residency = (fields: Partial<AdapterResidency>): AdapterResidency => ({
      running: [],
      waiting: [],
      maxLoras: 2,
      ...fields,
    });
    const running = waitOf('a', residency({ running: ['a', 'b'] }), PRICES);
    const freeSlot = waitOf('a', residency({ running: ['b'] }), PRICES);
    const waiting = waitOf('a', residency({ running: ['b', 'c'], waiting: ['a'] }), PRICES);
    const full = waitOf('a', residency({ running: ['b', 'c'], waiting: ['d'] }), PRICES);
    expect([running, freeSlot, waiting, full]).toEqual([0, 200, 400, 600]);
    expect(waitOf('a', null, PRICES)).toBe(200);
    expect(waitOf('a', residency({ running: ['b', 'c', 'd'], maxLoras: null }), PRICES)).toBe(200);
  });

  it("routes an adapter's request in its base model's pool with its waits; a base model's request is left alone", async () => {
    let nowMs = 0;
    const residencies: Record<string, AdapterResidency> = {
      e1: { running: ['tenant-a'], waiting: [], maxLoras: 1 },
      e2: { running: [], waiting: [], maxLoras: 1 },
    };
    const adapters = new AdapterRouting({
      registry: { baseModelOf: (model) => (model.startsWith('tenant-') ? 'base' : null), poolFor: () => [] },
      loader: null,
      residencyOf: (engineId) => residencies[engineId] ?? null,
      prices: PRICES,
      nowMs: () => nowMs,
    });
    const pool = [backendOf('e1'), backendOf('e2'), backendOf('e3')];
    expect(adapters.baseOf('base')).toBeNull();
    expect(adapters.baseOf('tenant-a')).toBe('base');
    const routed = await adapters.resolve(parsedOf('tenant-a'), pool, 'base');
    expect(routed?.model).toBe('base');
    // The routing text (and so the prefix hashes) still names the adapter.
    expect(routed?.routingRequest.model).toBe('tenant-a');
    expect(routed?.routingRequest.adapterWaitMs).toEqual(
      new Map([
        ['e1', 0],
        ['e2', 200],
        ['e3', 200],
      ]),
    );
    // Sent to e3 by this replica: counted as running there until the poller could have seen it.
    adapters.routed('tenant-b', 'e3');
    expect(adapters.waitsOn('tenant-b', pool).get('e3')).toBe(0);
    nowMs += PRICES.recentMs + 1;
    expect(adapters.waitsOn('tenant-b', pool).get('e3')).toBe(200);
  });
});
