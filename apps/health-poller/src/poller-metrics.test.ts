import type { BackendState } from '@kvroute/protocols';
import { describe, expect, it } from 'vitest';
import { PollerMetrics } from './poller-metrics';

const state = (overrides: Partial<BackendState>): BackendState => ({
  backendId: 'b1',
  engine: 'sglang',
  failure: null,
  kvUsage: 0.42,
  kvCapacityTokens: 100_000,
  running: 3,
  waiting: 1,
  prefixCacheHitRate: 0.8,
  preemptionsTotal: 0,
  engineStartedAtMs: null,
  healthy: true,
  consecutiveFailures: 0,
  consecutiveSuccesses: 3,
  healthyChangedAtMs: 0,
  scrapedAtMs: 0,
  restartedAtMs: null,
  loraAdapters: null,
  ...overrides,
});

async function values(metrics: PollerMetrics, name: string): Promise<string[]> {
  const metric = await metrics.registry.getSingleMetric(name)?.get();
  return (metric?.values ?? []).map((value) => `${value.labels['backend']}/${value.labels['engine']}=${value.value}`);
}

describe('PollerMetrics: per-backend gauges', () => {
  it("shows each backend's normalised engine figures while fresh, whatever its dialect; unknown figures are left out", async () => {
    let now = 1_000;
    const metrics = new PollerMetrics({ backends: () => 2, nowMs: () => now, backendFreshForMs: 5_000 });
    metrics.recordBackendState(state({}), 1_000);
    metrics.recordBackendState(
      state({ backendId: 'b2', engine: 'llamacpp', kvUsage: null, healthy: false, prefixCacheHitRate: null }),
      1_000,
    );
    expect(await values(metrics, 'kvroute_poller_backend_kv_cache_usage_ratio')).toEqual(['b1/sglang=0.42']);
    expect(await values(metrics, 'kvroute_poller_backend_healthy')).toEqual(['b1/sglang=1', 'b2/llamacpp=0']);
    expect(await values(metrics, 'kvroute_poller_backend_requests_waiting')).toEqual(['b1/sglang=1', 'b2/llamacpp=1']);
    expect(await values(metrics, 'kvroute_poller_backend_prefix_cache_hit_ratio')).toEqual(['b1/sglang=0.8']);

    // b1 scraped again (another replica took b2's jobs): b2 goes once it is older than the window.
    now = 5_500;
    metrics.recordBackendState(state({ kvUsage: 0.5 }), 5_500);
    now = 6_500;
    expect(await values(metrics, 'kvroute_poller_backend_kv_cache_usage_ratio')).toEqual(['b1/sglang=0.5']);
    expect(await values(metrics, 'kvroute_poller_backend_healthy')).toEqual(['b1/sglang=1']);
  });

  it('drops stale backends as states are recorded, without any scrape of /metrics (pod churn stays bounded)', async () => {
    let now = 0;
    const metrics = new PollerMetrics({ backends: () => 1, nowMs: () => now, backendFreshForMs: 1_000 });
    // A new pod every 10 ms for 100 s, one stable backend scraped all along; nobody scrapes /metrics.
    for (let pod = 0; pod < 10_000; pod++) {
      now = pod * 10;
      metrics.recordBackendState(state({ backendId: `vllm@10.0.${Math.floor(pod / 250)}.${pod % 250}:8000` }), now);
      if (pod % 50 === 0) metrics.recordBackendState(state({ backendId: 'stable' }), now);
    }
    // Only those recorded within the last second: 101 pods (1 000 ms / 10 ms, both ends) and the stable one.
    expect(metrics.keptBackendStates).toBe(102);
    const healthy = await values(metrics, 'kvroute_poller_backend_healthy');
    expect(healthy).toContain('stable/sglang=1');
    expect(healthy).toHaveLength(102);
  });

  it('forgets the series of backends that left the list: counters and gauges alike, the others untouched', async () => {
    const metrics = new PollerMetrics({ backends: () => 2, nowMs: () => 0 });
    for (const backend of ['stays', 'leaves']) {
      metrics.recordScrape(backend, 0.01, null);
      metrics.recordScrape(backend, 0.01, 'timeout');
      metrics.recordPublished(backend);
      metrics.recordEngineRestart(backend, 'start-time-changed');
      metrics.recordLoraInfoMalformed(backend);
      metrics.recordBackendState(state({ backendId: backend }), 0);
    }
    const series = async (name: string) =>
      ((await metrics.registry.getSingleMetric(name)?.get())?.values ?? [])
        .map((value) => String(value.labels['backend']))
        .sort();
    const names = [
      'kvroute_poller_scrapes_total',
      'kvroute_poller_scrape_failures_total',
      'kvroute_poller_state_changes_published_total',
      'kvroute_poller_engine_restarts_total',
      'kvroute_poller_lora_info_malformed_total',
      'kvroute_poller_backend_healthy',
    ];
    for (const name of names) expect(await series(name), name).toEqual(['leaves', 'stays']);
    expect(await metrics.forgetDepartedBackends(new Set(['stays']))).toBe(5);
    for (const name of names) expect(await series(name), name).toEqual(['stays']);
    // The one that stays counts on from where it was.
    metrics.recordScrape('stays', 0.01, null);
    expect(
      (await metrics.registry.getSingleMetric('kvroute_poller_scrapes_total')?.get())?.values.find(
        (value) => value.labels['backend'] === 'stays',
      )?.value,
    ).toBe(3);
  });
});
