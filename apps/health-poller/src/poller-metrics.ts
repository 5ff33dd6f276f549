import type { EngineRestartSign } from '@kvroute/engine-metrics';
import type { ScrapeFailureCause } from '@kvroute/protocols';
import { buildInfo } from '@kvroute/platform';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/**
 * Every health-poller metric, in one place, with intent-named recorders. Base units (seconds), `_total`
 * on counters, bounded labels: backend ids come from config and the fleet's backend set, causes from
 * `SCRAPE_FAILURE_CAUSES`, restart signs from `EngineRestartSign`. Each replica counts what it did itself: sum over replicas for the fleet.
 */
export interface PollerMetricsSources {
  /** Backends this replica keeps a job scheduler for (read at scrape time). */
  readonly backends: () => number;
}

const SCRAPE_BUCKETS_SECONDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
const LAG_BUCKETS_SECONDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

export class PollerMetrics {
  readonly registry = new Registry();
  private readonly scrapes: Counter<'backend'>;
  private readonly scrapeDuration: Histogram;
  private readonly failures: Counter<'backend' | 'cause'>;
  private readonly jobLag: Histogram;
  private readonly staleJobs: Counter;
  private readonly published: Counter<'backend'>;
  private readonly restarts: Counter<'backend' | 'sign'>;

  constructor(sources: PollerMetricsSources) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry, prefix: 'kvroute_poller_' });
    const build = buildInfo();
    new Gauge({
      name: 'kvroute_build_info',
      help: 'Always 1; its labels say which kvroute build this process runs (the same in every kvroute app: job tells them apart).',
      labelNames: ['version', 'commit'],
      registers,
    }).set({ version: build.version, commit: build.commit }, 1);
    this.scrapes = new Counter({
      name: 'kvroute_poller_scrapes_total',
      help: 'Scrapes this replica ran, per backend (failed ones included).',
      labelNames: ['backend'],
      registers,
    });
    this.scrapeDuration = new Histogram({
      name: 'kvroute_poller_scrape_duration_seconds',
      help: 'Wall time of one scrape: its /health, /metrics (and llama.cpp /slots) requests, in parallel.',
      buckets: SCRAPE_BUCKETS_SECONDS,
      registers,
    });
    this.failures = new Counter({
      name: 'kvroute_poller_scrape_failures_total',
      help: 'Failed scrapes per backend and first cause (connect, timeout, loading, health_status, metrics_status, unreadable).',
      labelNames: ['backend', 'cause'],
      registers,
    });
    this.jobLag = new Histogram({
      name: 'kvroute_poller_job_lag_seconds',
      help: 'How late a scrape job started after the time its job scheduler planned it for.',
      buckets: LAG_BUCKETS_SECONDS,
      registers,
    });
    this.staleJobs = new Counter({
      name: 'kvroute_poller_stale_jobs_total',
      help: 'Scrape jobs skipped because they started more than one interval late (a newer job of the same backend is already planned).',
      registers,
    });
    this.published = new Counter({
      name: 'kvroute_poller_state_changes_published_total',
      help: "Backend states published on the changes channel because the backend's health or load changed.",
      labelNames: ['backend'],
      registers,
    });
    this.restarts = new Counter({
      name: 'kvroute_poller_engine_restarts_total',
      help: "Engine restarts this replica found, per backend and sign (start_time_changed, engine_changed, counter_went_down): the scrape's state carries restartedAtMs and routers forget the backend's prefix ownership.",
      labelNames: ['backend', 'sign'],
      registers,
    });
    new Gauge({
      name: 'kvroute_poller_backends',
      help: 'Backends this replica keeps a job scheduler for (configured plus the shared backend set).',
      registers,
      collect() {
        this.set(sources.backends());
      },
    });
  }

  recordScrape(backend: string, seconds: number, failure: ScrapeFailureCause | null): void {
    this.scrapes.inc({ backend });
    this.scrapeDuration.observe(seconds);
    if (failure !== null) this.failures.inc({ backend, cause: failure });
  }

  recordJobLag(seconds: number): void {
    this.jobLag.observe(Math.max(0, seconds));
  }

  recordStaleJob(): void {
    this.staleJobs.inc();
  }

  recordPublished(backend: string): void {
    this.published.inc({ backend });
  }

  recordEngineRestart(backend: string, sign: EngineRestartSign): void {
    this.restarts.inc({ backend, sign: sign.replaceAll('-', '_') });
  }
}
