import { z } from 'zod';
import { ENGINE_KINDS } from './engine-kinds';

/**
 * A backend's state as the health poller publishes it through Redis (`apps/health-poller`, stored by
 * `@kvroute/redis-store`'s `RedisBackendStateStore`) and routers read it: health with hysteresis, and the
 * load figures of its last scrape. `null` in a figure always means "unknown": the engine does not
 * expose it, or the last scrape could not read `/metrics`.
 */

/** Engines as the poller reports them: the known kinds, plus `unknown` until a `/metrics` was read. */
export const BACKEND_ENGINES = [...ENGINE_KINDS, 'unknown'] as const;
export const BackendEngine = z.enum(BACKEND_ENGINES);
export type BackendEngine = z.infer<typeof BackendEngine>;

/**
 * Why a scrape failed, first cause only (the health probe's before the metrics read's):
 * - `connect`: refused, reset or unreachable; `timeout`: no full answer within the scrape timeout;
 * - `loading`: the health endpoint answered 503 (engine starting, model loading, or dead);
 * - `health_status`: the health endpoint answered another non-200 status;
 * - `metrics_status`: `/metrics` answered non-200; `unreadable`: `/metrics` is no engine's exposition.
 * The first four fail the health probe; the last two only leave the load figures unknown.
 */
export const SCRAPE_FAILURE_CAUSES = [
  'connect',
  'timeout',
  'loading',
  'health_status',
  'metrics_status',
  'unreadable',
] as const;
export const ScrapeFailureCause = z.enum(SCRAPE_FAILURE_CAUSES);
export type ScrapeFailureCause = z.infer<typeof ScrapeFailureCause>;

const ratio = z.number().min(0).max(1).nullable();
const amount = z.number().min(0).nullable();
/** ms since the Unix epoch. */
const timestamp = z.number().int().min(0);

/** An adapter's served name (`--lora-modules name=…`, `load_lora_adapter`'s `lora_name`). */
const adapterName = z.string().min(1).max(256);
/** Distinct names, sorted by code unit (so a reordering at the engine publishes no change). */
const adapterNames = z.array(adapterName).max(256).readonly();

/**
 * LoRA adapter residency as the engine reported it at its last stats update (vLLM's
 * `vllm:lora_requests_info`, its newest series). A name in `running` is loaded on the GPU now; one in
 * `waiting` only is asked for by queued requests (it may have to be loaded, evicting another).
 */
export const LoraAdapters = z.object({
  /** Adapters of the requests in the running batch. */
  running: adapterNames,
  /** Adapters of the queued requests. */
  waiting: adapterNames,
  /** How many distinct adapters one batch may hold (`--max-loras`), a count; null when the engine does not say. */
  maxLoras: z.number().int().min(0).nullable(),
});
export type LoraAdapters = z.infer<typeof LoraAdapters>;

/** What one scrape saw, before health hysteresis. */
export const BackendObservation = z.object({
  engine: BackendEngine,
  /** Why this scrape failed; null when both the health probe and the metrics read succeeded. */
  failure: ScrapeFailureCause.nullable(),
  /** KV-cache usage in [0, 1]; 1 = full. */
  kvUsage: ratio,
  /** KV-cache capacity, tokens. */
  kvCapacityTokens: amount,
  /** Requests in the running batch. */
  running: amount,
  /** Requests queued (preempted ones included). */
  waiting: amount,
  /** Prefix-cache hit rate in [0, 1] since the previous scrape (engines without counters: their own gauge). */
  prefixCacheHitRate: ratio,
  /** Preemptions since the engine started (a counter). */
  preemptionsTotal: amount,
  /**
   * ms since the Unix epoch when the engine's process started (`process_start_time_seconds`, which only
   * engines serving prometheus_client's default registry print: vLLM V1 with one API server). Absent in
   * states published before the field existed: null.
   */
  engineStartedAtMs: timestamp.nullable().default(null),
  /**
   * LoRA adapters the engine serves (see `LoraAdapters`). null: unknown, the engine shows no LoRA metric
   * (LoRA off, no adapter used since it started, not vLLM), its metric is malformed, or `/metrics` could
   * not be read. Absent in states published before the field existed: null.
   */
  loraAdapters: LoraAdapters.nullable().default(null),
});
export type BackendObservation = z.infer<typeof BackendObservation>;

/** A backend's published state: the last observation plus health with hysteresis. */
export const BackendState = BackendObservation.extend({
  backendId: z.string().min(1),
  /**
   * Healthy with hysteresis: turns false after `failuresToUnhealthy` consecutive failed health probes,
   * true again after `successesToHealthy` consecutive good ones. A backend without history (first scrape,
   * or its state expired) takes the outcome of its first probe.
   */
  healthy: z.boolean(),
  consecutiveFailures: z.number().int().min(0),
  consecutiveSuccesses: z.number().int().min(0),
  /** ms since the Unix epoch when `healthy` last changed (or was first set). */
  healthyChangedAtMs: z.number().int().min(0),
  /** ms since the Unix epoch when the scrape that produced this state finished. */
  scrapedAtMs: timestamp,
  /**
   * ms since the Unix epoch (the poller's clock) of the scrape that last found the engine restarted
   * (its process start time changed, or a counter went down): what it cached is gone. null while no
   * restart was seen in this state's lifetime (and in states published before the field existed).
   * Routers forget the backend's prefix ownership when it moves forward.
   */
  restartedAtMs: timestamp.nullable().default(null),
});
export type BackendState = z.infer<typeof BackendState>;
