import { detectEngineRestart, hitRateOverInterval, type EngineMetrics } from '@kvroute/engine-metrics';
import type { BackendState } from '@kvroute/protocols';
import type { RecordScrapeOptions, ScrapeRecord } from '@kvroute/redis-store';
import { describe, expect, it } from 'vitest';
import { PollerMetrics } from './poller-metrics';
import type { ScrapeOutcome } from './scrape-backend';
import { runScrapeJob, type ScrapeJobDeps } from './scrape-job';

const figures = (overrides: Partial<EngineMetrics> = {}): EngineMetrics => ({
  engine: 'vllm',
  kvUsage: 0.2,
  kvCapacityTokens: 1536,
  running: 1,
  waiting: 0,
  preemptionsTotal: 0,
  generationTokensTotal: 500,
  prefixCacheQueriesTotal: 2000,
  prefixCacheHitsTotal: 800,
  prefixCacheCounterUnit: 'tokens',
  prefixCacheHitRate: null,
  engineStartedAtMs: 1_796_000_000_000,
  loraAdapters: null,
  loraAdaptersMalformed: false,
  ...overrides,
});

const served = (metrics: EngineMetrics): ScrapeOutcome => ({ healthPassed: true, failure: null, metrics });
const refused: ScrapeOutcome = { healthPassed: false, failure: 'connect', metrics: null };

/** A store that keeps one backend's carry and restart time, as record-backend-scrape.lua does. */
function aStore() {
  let carry: string | null = null;
  let restartedAtMs: number | null = null;
  const records: ScrapeRecord[] = [];
  return {
    records,
    async readCarry() {
      return carry;
    },
    async record(scrape: ScrapeRecord, _options: RecordScrapeOptions) {
      records.push(scrape);
      if (scrape.carry !== null) carry = scrape.carry;
      if (scrape.restartedAtMs != null && (restartedAtMs === null || scrape.restartedAtMs > restartedAtMs))
        restartedAtMs = scrape.restartedAtMs;
      const state: BackendState = {
        ...scrape.observation,
        backendId: scrape.backendId,
        healthy: scrape.healthPassed,
        consecutiveFailures: 0,
        consecutiveSuccesses: 0,
        healthyChangedAtMs: 0,
        scrapedAtMs: scrape.scrapedAtMs,
        restartedAtMs,
      };
      return { state, published: true };
    },
  };
}

function aJob(outcomes: ScrapeOutcome[]) {
  const store = aStore();
  const metrics = new PollerMetrics({ backends: () => 1 });
  let clock = 10_000;
  const deps: ScrapeJobDeps = {
    store,
    scrape: async () => outcomes.shift() ?? refused,
    hitRate: hitRateOverInterval,
    detectRestart: detectEngineRestart,
    metrics,
    nowMs: () => (clock += 100),
    intervalMs: 1000,
    hysteresis: { failuresToUnhealthy: 2, successesToHealthy: 2 },
    stateTtlMs: 3000,
  };
  const run = async (): Promise<BackendState> => {
    const result = await runScrapeJob({ backendId: 'b', url: 'http://b', engine: null }, clock, deps);
    if (result.kind !== 'scraped') throw new Error('stale');
    return result.state;
  };
  const restartsCounted = async (): Promise<string> =>
    (await metrics.registry.getSingleMetric('kvroute_poller_engine_restarts_total')?.get())?.values
      .map((value) => `${value.labels.sign}=${value.value}`)
      .join(',') ?? '';
  return { store, run, restartsCounted };
}

describe('runScrapeJob: engine restarts', () => {
  it('records restartedAtMs at the scrape that sees a new process start time, and publishes the start time', async () => {
    const job = aJob([
      served(figures()),
      served(figures({ prefixCacheQueriesTotal: 2600, prefixCacheHitsTotal: 1100 })),
      served(figures({ engineStartedAtMs: 1_796_000_090_000, prefixCacheQueriesTotal: 300, prefixCacheHitsTotal: 0 })),
    ]);
    const first = await job.run();
    expect(first).toMatchObject({ restartedAtMs: null, engineStartedAtMs: 1_796_000_000_000 });
    const second = await job.run();
    expect(second).toMatchObject({ restartedAtMs: null, prefixCacheHitRate: 0.5 });
    const restarted = await job.run();
    expect(restarted).toMatchObject({ restartedAtMs: restarted.scrapedAtMs, engineStartedAtMs: 1_796_000_090_000 });
    // No interval behind the new process: the counters from zero are not a rate over the interval.
    expect(restarted.prefixCacheHitRate).toBeNull();
    expect(job.store.records.map((record) => record.restartedAtMs)).toEqual([null, null, restarted.scrapedAtMs]);
    expect(await job.restartsCounted()).toBe('start_time_changed=1');
  });

  it('sees a restart across failed scrapes (the engine was down): the last figures read are the baseline', async () => {
    const noStartTime = { engine: 'sglang', engineStartedAtMs: null } as const;
    const job = aJob([
      served(figures(noStartTime)),
      refused,
      refused,
      served(
        figures({ ...noStartTime, generationTokensTotal: 20, prefixCacheQueriesTotal: 90, prefixCacheHitsTotal: 0 }),
      ),
    ]);
    await job.run();
    expect((await job.run()).restartedAtMs).toBeNull();
    expect((await job.run()).engineStartedAtMs).toBeNull();
    const back = await job.run();
    expect(back.restartedAtMs).toBe(back.scrapedAtMs);
    expect(await job.restartsCounted()).toBe('counter_went_down=1');
  });

  it('sees no restart at the first scrape of a backend, nor while the same process serves', async () => {
    const job = aJob([
      served(figures()),
      served(figures({ generationTokensTotal: 900 })),
      refused,
      served(figures({ generationTokensTotal: 950 })),
    ]);
    for (let i = 0; i < 4; i++) expect((await job.run()).restartedAtMs).toBeNull();
    expect(await job.restartsCounted()).toBe('');
  });
});
