import type { EngineRestartSign } from '@kvroute/engine-metrics';
import type { BackendState, ScrapeFailureCause } from '@kvroute/protocols';
import { registerBuildInfoGauge } from '@kvroute/platform';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { KvEventsMetricsSink, KvEventsProblem } from './kv-events/rank-subscription';

/**
 * Every health-poller metric, in one place, with intent-named recorders. Base units (seconds), `_total`
 * on counters, bounded labels: backend ids come from config and the fleet's backend set, causes from
 * `SCRAPE_FAILURE_CAUSES`, restart signs from `EngineRestartSign`. Each replica counts what it did itself: sum over replicas for the fleet.
 */
export interface PollerMetricsSources {
  /** Backends this replica keeps a job scheduler for (read at scrape time). */
  readonly backends: () => number;
  /** Clock of the per-backend gauges' freshness, ms (default Date.now). */
  readonly nowMs?: () => number;
  /**
   * How long a backend's last scraped state is shown after this replica scraped it, ms (default 60 s:
   * several scrape intervals). Scrapes are spread over the poller replicas, so each shows the
   * backends it scraped lately; a dashboard takes `max by (backend)` over replicas.
   */
  readonly backendFreshForMs?: number;
}

/** The per-backend gauges' figures: the engine's own, in every dialect, as the poller normalised them (BackendState). */
const BACKEND_GAUGES = [
  [
    'kvroute_poller_backend_healthy',
    'Whether the backend is healthy (1) or not (0), with hysteresis, as this replica last scraped it.',
    (state: BackendState) => (state.healthy ? 1 : 0),
  ],
  [
    'kvroute_poller_backend_kv_cache_usage_ratio',
    "The engine's KV-cache usage, 0-1 (vLLM V0/V1, SGLang, llama.cpp alike), at this replica's last scrape.",
    (state: BackendState) => state.kvUsage,
  ],
  [
    'kvroute_poller_backend_requests_running',
    "Requests in the engine's running batch at the last scrape.",
    (state: BackendState) => state.running,
  ],
  [
    'kvroute_poller_backend_requests_waiting',
    'Requests queued in the engine (preempted ones included) at the last scrape.',
    (state: BackendState) => state.waiting,
  ],
  [
    'kvroute_poller_backend_prefix_cache_hit_ratio',
    "The engine's prefix-cache hit rate, 0-1, between its last two scrapes (engines without counters: their own gauge).",
    (state: BackendState) => state.prefixCacheHitRate,
  ],
] as const;

const SCRAPE_BUCKETS_SECONDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
const LAG_BUCKETS_SECONDS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

export class PollerMetrics implements KvEventsMetricsSink {
  readonly registry = new Registry();
  private readonly kvBatches: Counter<'outcome'>;
  private readonly kvProblems: Counter<'problem'>;
  private readonly kvBlocks: Counter<'op'>;
  private readonly kvResyncs: Counter<'reason'>;
  private readonly kvSubscriptions: Gauge;
  private readonly scrapes: Counter<'backend'>;
  private readonly scrapeDuration: Histogram;
  private readonly failures: Counter<'backend' | 'cause'>;
  private readonly jobLag: Histogram;
  private readonly staleJobs: Counter;
  private readonly published: Counter<'backend'>;
  private readonly restarts: Counter<'backend' | 'sign'>;
  private readonly loraInfoMalformed: Counter<'backend'>;

  /**
   * Each backend's last state this replica scraped, and when (ms), oldest record first (a record moves
   * its backend to the end), so that stale entries are dropped from the front as states are recorded:
   * without scrapes of /metrics it would otherwise keep every backend ever seen (discovered pods).
   */
  private readonly lastStates = new Map<string, { state: BackendState; atMs: number }>();
  private readonly nowMs: () => number;
  private readonly freshForMs: number;

  constructor(sources: PollerMetricsSources) {
    const nowMs = sources.nowMs ?? Date.now;
    const freshForMs = sources.backendFreshForMs ?? 60_000;
    this.nowMs = nowMs;
    this.freshForMs = freshForMs;
    const lastStates = this.lastStates;
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry, prefix: 'kvroute_poller_' });
    registerBuildInfoGauge(this.registry);
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
      help:
        'Engine restarts this replica found, per backend and sign (start_time_changed, engine_changed, ' +
        "counter_went_down): the scrape's state carries restartedAtMs and routers forget the backend's " +
        'prefix ownership.',
      labelNames: ['backend', 'sign'],
      registers,
    });
    this.loraInfoMalformed = new Counter({
      name: 'kvroute_poller_lora_info_malformed_total',
      help:
        'Scrapes whose vllm:lora_requests_info could not be read (NaN/Inf value, a label missing, max_lora not a ' +
        'count, over 256 names or a name over 256 characters), per backend: the state says its LoRA adapters are unknown.',
      labelNames: ['backend'],
      registers,
    });
    this.kvBatches = new Counter({
      name: 'kvroute_poller_kv_event_batches_total',
      help:
        "KV-event batches taken off the engines' streams by this replica, per outcome: applied (to the owner " +
        'index), named_only (a replay of batches applied before a takeover, warming the block names), ' +
        'duplicate (delivered twice: replay and live), dropped (the queue was full; found as a gap and replayed).',
      labelNames: ['outcome'],
      registers,
    });
    this.kvProblems = new Counter({
      name: 'kvroute_poller_kv_event_problems_total',
      help:
        'Bad or lost KV-event input, skipped and counted (never thrown): malformed_batch (frames or msgpack), ' +
        'oversized_batch (over kvEventsMaxBatchEvents/Blocks/MessageBytes, dropped whole), malformed_event, unknown_event, ' +
        'ignored_event (another medium than GPU, or KV-cache group), queue_overflow, unknown_hash (a removed ' +
        'block never named here), orphan_block (a stored block whose parent has no name), sequence_gap, ' +
        'sequence_backwards (publisher restart), replay_short (the buffer no longer reached back), ' +
        'replay_timeout, apply_failed (Redis), subscribe_failed (zeromq refused the endpoint: left unread), ' +
        'lease_expired (a batch held back past the last renewal + TTL).',
      labelNames: ['problem'],
      registers,
    });
    this.kvBlocks = new Counter({
      name: 'kvroute_poller_kv_event_blocks_total',
      help: 'Blocks written into the owner index from KV events: stored (recorded as held), removed (owner entries deleted).',
      labelNames: ['op'],
      registers,
    });
    this.kvResyncs = new Counter({
      name: 'kvroute_poller_kv_event_resyncs_total',
      help:
        "A rank's ownership forgotten at once because of its stream: cleared (AllBlocksCleared), restart " +
        '(the sequence went backwards), gap (lost batches no replay could bring back).',
      labelNames: ['reason'],
      registers,
    });
    this.kvSubscriptions = new Gauge({
      name: 'kvroute_poller_kv_event_subscriptions',
      help: "Backend ranks' KV-event streams this replica reads (holds the lease of).",
      registers,
    });
    for (const [name, help, figure] of BACKEND_GAUGES) {
      new Gauge({
        name,
        help,
        labelNames: ['backend', 'engine'],
        registers,
        collect() {
          this.reset();
          const now = nowMs();
          for (const [backend, { state, atMs }] of lastStates) {
            if (now - atMs > freshForMs) {
              lastStates.delete(backend);
              continue;
            }
            const value = figure(state);
            if (value !== null) this.set({ backend, engine: state.engine }, value);
          }
        },
      });
    }
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

  /** A scrape's resulting state (shown by the per-backend gauges while fresh). */
  recordBackendState(state: BackendState, atMs: number): void {
    this.lastStates.delete(state.backendId);
    this.lastStates.set(state.backendId, { state, atMs });
    // Oldest first: drop stale entries from the front until a fresh one (amortised O(1) per record).
    const now = this.nowMs();
    for (const [backend, entry] of this.lastStates) {
      if (now - entry.atMs <= this.freshForMs) break;
      this.lastStates.delete(backend);
    }
  }

  /** How many backends' last states are kept (for tests: bounded by those scraped within the freshness window). */
  get keptBackendStates(): number {
    return this.lastStates.size;
  }

  recordPublished(backend: string): void {
    this.published.inc({ backend });
  }

  recordEngineRestart(backend: string, sign: EngineRestartSign): void {
    this.restarts.inc({ backend, sign: sign.replaceAll('-', '_') });
  }

  recordLoraInfoMalformed(backend: string): void {
    this.loraInfoMalformed.inc({ backend });
  }

  recordKvBatch(outcome: 'applied' | 'named_only' | 'duplicate' | 'dropped'): void {
    this.kvBatches.inc({ outcome });
  }

  recordKvProblem(problem: KvEventsProblem, count = 1): void {
    this.kvProblems.inc({ problem }, count);
  }

  recordKvBlocks(op: 'stored' | 'removed', count: number): void {
    this.kvBlocks.inc({ op }, count);
  }

  recordKvResync(reason: 'cleared' | 'restart' | 'gap'): void {
    this.kvResyncs.inc({ reason });
  }

  setKvSubscriptions(count: number): void {
    this.kvSubscriptions.set(count);
  }

  /** A KV-event counter's value (tests, the bench). */
  async kvCount(name: 'batches' | 'problems' | 'blocks' | 'resyncs', label: string): Promise<number> {
    const counter = {
      batches: this.kvBatches,
      problems: this.kvProblems,
      blocks: this.kvBlocks,
      resyncs: this.kvResyncs,
    }[name] as Counter<string>;
    const found = (await counter.get()).values.find((value) => Object.values(value.labels).includes(label));
    return found?.value ?? 0;
  }

  /**
   * Removes every per-backend series of backends no longer in the list (`current`: ids), so that a
   * fleet whose pods come and go (discovery, an HPA) does not grow /metrics and these counters forever.
   * A backend that comes back starts its counters from 0, which Prometheus' rate() reads as a reset.
   * Returns how many series went.
   */
  async forgetDepartedBackends(current: ReadonlySet<string>): Promise<number> {
    let removed = 0;
    for (const counter of [this.scrapes, this.failures, this.published, this.restarts, this.loraInfoMalformed] as Array<
      Counter<string>
    >) {
      for (const { labels } of (await counter.get()).values) {
        if (current.has(String(labels['backend']))) continue;
        counter.remove(labels);
        removed += 1;
      }
    }
    for (const backend of this.lastStates.keys()) if (!current.has(backend)) this.lastStates.delete(backend);
    return removed;
  }
}
