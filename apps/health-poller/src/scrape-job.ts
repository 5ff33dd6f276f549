import { ENGINE_KINDS, type EngineKind, type EngineMetrics, type EngineRestart } from '@kvroute/engine-metrics';
import type { BackendObservation, BackendState } from '@kvroute/protocols';
import type { HealthHysteresis, RecordedScrape, RecordScrapeOptions, ScrapeRecord } from '@kvroute/redis-store';
import type { FastifyBaseLogger } from 'fastify';
import type { PollerMetrics } from './poller-metrics';
import type { ScrapeOutcome, ScrapeTarget } from './scrape-backend';

/** What each scrape job carries (the job scheduler's template: one per backend). */
export interface ScrapeJobData {
  readonly backendId: string;
  readonly url: string;
  /** Configured engine kind; null = tell from /metrics. */
  readonly engine: EngineKind | null;
}

export interface ScrapeJobDeps {
  readonly store: {
    readCarry(backendId: string): Promise<string | null>;
    record(scrape: ScrapeRecord, options: RecordScrapeOptions): Promise<RecordedScrape>;
  };
  readonly scrape: (target: ScrapeTarget) => Promise<ScrapeOutcome>;
  /** Prefix-cache hit rate between two scrapes (`hitRateOverInterval` of @kvroute/engine-metrics). */
  readonly hitRate: (previous: EngineMetrics, current: EngineMetrics) => number | null;
  /** Whether the engine restarted between two scrapes (`detectEngineRestart` of @kvroute/engine-metrics). */
  readonly detectRestart: (previous: EngineMetrics, current: EngineMetrics) => EngineRestart | null;
  readonly metrics: PollerMetrics;
  readonly nowMs: () => number;
  readonly intervalMs: number;
  readonly hysteresis: HealthHysteresis;
  readonly stateTtlMs: number;
  readonly logger?: FastifyBaseLogger | undefined;
}

export type ScrapeJobResult =
  | { readonly kind: 'stale'; readonly lagMs: number }
  | { readonly kind: 'scraped'; readonly state: BackendState; readonly published: boolean };

/**
 * One scrape job: scrape the backend, then record the outcome in Redis, where the health hysteresis
 * runs on counters every poller replica shares (`RedisBackendStateStore.record`).
 *
 * A job that starts more than one interval after its planned time is skipped: the scheduler has
 * planned the next one already (BullMQ does so when a job is taken), so running this one too would
 * scrape the backend twice in one interval. That happens when a job of a dead poller comes back from
 * the stalled check, or when every poller was away.
 *
 * Between scrapes the previous figures travel through Redis (the state hash's carry) rather than in
 * this process: the next scrape of the backend may run on another replica, and the prefix-cache hit
 * rate over the interval needs the previous counters.
 *
 * The same previous figures (the last scrape that read `/metrics`, however many failed since) tell
 * whether the engine restarted: a new process start time, another engine kind, or a counter lower than
 * before. Then the state records `restartedAtMs` = this scrape's time (routers forget the backend's
 * prefix ownership when it moves forward), and the hit rate has no interval behind it.
 */
export async function runScrapeJob(
  data: ScrapeJobData,
  scheduledAtMs: number,
  deps: ScrapeJobDeps,
): Promise<ScrapeJobResult> {
  const startedAtMs = deps.nowMs();
  const lagMs = startedAtMs - scheduledAtMs;
  deps.metrics.recordJobLag(lagMs / 1000);
  if (lagMs > deps.intervalMs) {
    deps.metrics.recordStaleJob();
    deps.logger?.debug({ backend: data.backendId, lagMs }, 'skipping a stale scrape job');
    return { kind: 'stale', lagMs };
  }

  const previous = decodeCarry(await deps.store.readCarry(data.backendId));
  const outcome = await deps.scrape({ url: data.url, engine: data.engine ?? previous?.engine ?? null });
  const scrapedAtMs = deps.nowMs();
  deps.metrics.recordScrape(data.backendId, (scrapedAtMs - startedAtMs) / 1000, outcome.failure);

  const current = outcome.metrics;
  const restart = current !== null && previous !== null ? deps.detectRestart(previous, current) : null;
  if (restart !== null) {
    deps.metrics.recordEngineRestart(data.backendId, restart.sign);
    deps.logger?.info({ backend: data.backendId, restart }, 'engine restarted: its prefix cache is empty');
  }
  if (current !== null) noteLoraInfo(data.backendId, previous, current, deps);
  const observation: BackendObservation = {
    // Every EngineKind is a BackendEngine: BACKEND_ENGINES is ENGINE_KINDS plus `unknown`.
    engine: current?.engine ?? previous?.engine ?? data.engine ?? 'unknown',
    failure: outcome.failure,
    kvUsage: current?.kvUsage ?? null,
    kvCapacityTokens: current?.kvCapacityTokens ?? null,
    running: current?.running ?? null,
    waiting: current?.waiting ?? null,
    // The first scrape (or the first of a new process) has no interval behind it: only an engine's own gauge can
    // answer (same figures twice → no counter delta).
    prefixCacheHitRate:
      current === null ? null : deps.hitRate(restart === null ? (previous ?? current) : current, current),
    preemptionsTotal: current?.preemptionsTotal ?? null,
    engineStartedAtMs: current?.engineStartedAtMs ?? null,
    loraAdapters: current?.loraAdapters ?? null,
  };
  const recorded = await deps.store.record(
    {
      backendId: data.backendId,
      healthPassed: outcome.healthPassed,
      observation,
      scrapedAtMs,
      carry: current === null ? null : carryOf(current),
      restartedAtMs: restart === null ? null : scrapedAtMs,
    },
    { ...deps.hysteresis, ttlMs: deps.stateTtlMs },
  );
  deps.metrics.recordBackendState(recorded.state, scrapedAtMs);
  if (recorded.published) deps.metrics.recordPublished(data.backendId);
  return { kind: 'scraped', state: recorded.state, published: recorded.published };
}

/**
 * A malformed `vllm:lora_requests_info` (the observation then says null: unknown): counted at every scrape
 * that reads it, logged when it turns malformed or readable again. The previous scrape's flag comes from
 * the carry, so replicas taking turns do not log it again.
 */
function noteLoraInfo(
  backend: string,
  previous: EngineMetrics | null,
  current: EngineMetrics,
  deps: Pick<ScrapeJobDeps, 'metrics' | 'logger'>,
): void {
  const malformed = current.loraAdaptersMalformed;
  if (malformed) deps.metrics.recordLoraInfoMalformed(backend);
  if (malformed === (previous?.loraAdaptersMalformed === true)) return;
  if (malformed) deps.logger?.warn({ backend }, 'vllm:lora_requests_info is malformed: LoRA residency unknown');
  else if (previous !== null) deps.logger?.info({ backend }, 'vllm:lora_requests_info is readable again');
}

/**
 * The figures the next scrape reads back, as JSON, without the adapter names (up to 2 × 256 names of 256
 * characters): nothing compares them between scrapes, and the observation holds them already.
 */
function carryOf(current: EngineMetrics): string {
  return JSON.stringify({ ...current, loraAdapters: null });
}

/** The figures a previous scrape left (its own JSON); null when none or not recognisable. */
function decodeCarry(carry: string | null): EngineMetrics | null {
  if (carry === null) return null;
  try {
    const value = JSON.parse(carry) as Partial<EngineMetrics> | null;
    return value !== null && typeof value === 'object' && (ENGINE_KINDS as readonly unknown[]).includes(value.engine)
      ? (value as EngineMetrics)
      : null;
  } catch {
    return null;
  }
}
