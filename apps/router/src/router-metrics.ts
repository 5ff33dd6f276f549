import type { ResponseUsage } from '@kvroute/protocols';
import type { LearnedCalibration, PredictionCheck } from '@kvroute/routing';
import { registerBuildInfoGauge } from '@kvroute/platform';
import { CACHE_VIEWS, type CacheView } from './backends/cache-views';
import type { ByteModeFallback } from './routing/token-routing';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

/**
 * Every router metric, in one place, with intent-named recorders. Base units (seconds), `_total` on
 * counters, bounded labels: backend ids and models come from config, policies and reasons from fixed
 * lists, status as a class-preserving code. Backend ids also come from discovery (one per pod), so a
 * departed backend's series are removed (forgetBackend).
 */
export interface RouterMetricsSources {
  /** In-flight leases per backend (read at scrape time). */
  readonly inflight: () => ReadonlyMap<string, number>;
  /** Breaker state per backend: 0 closed, 1 half-open, 2 open. */
  readonly breakerStates: () => ReadonlyMap<string, number>;
  /** 1 while shared routing state (Redis) is unusable and the router routes on local state. */
  readonly degraded: () => number;
  /** Each backend's cache view (backends/cache-views.ts); absent: none shown. */
  readonly cacheViews?: () => ReadonlyMap<string, CacheView>;
  /** Each backend's prefill/decode role (backends/backend-role.ts); absent: none shown. */
  readonly roles?: () => ReadonlyMap<string, string>;
  /** Requests and body bytes waiting in flow control's queue on this replica, per model (absent: flow control off). */
  readonly flowQueues?: () => ReadonlyMap<string, { readonly requests: number; readonly bytes: number }>;
}

/** Flow control's priority classes as labels (index = class). */
const FLOW_CLASSES = ['high', 'normal', 'low'] as const;

const LATENCY_BUCKETS_SECONDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];
/** Whole requests: a long non-streaming generation (reasoning, 32k tokens out) runs for many minutes; up to 30. */
const DURATION_BUCKETS_SECONDS = [...LATENCY_BUCKETS_SECONDS, 300, 600, 1200, 1800];
const DECISION_BUCKETS_SECONDS = [
  0.000_01, 0.000_025, 0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.0025, 0.005, 0.01,
];

/** A series of one label set (prom-client's `labels(...)`), kept so the label object is hashed once. */
type MetricChild = { inc(value?: number): void } | { observe(value: number): void } | { set(value: number): void };
type SeriesLabels = Readonly<Record<string, string>>;
/** What forgetBackend needs of a metric: prom-client's removal of one exact label set. */
interface RemovableMetric {
  remove(labels: SeriesLabels): void;
}
interface LabelledMetric<T extends MetricChild> extends RemovableMetric {
  labels(labels: SeriesLabels): T;
}

export class RouterMetrics {
  readonly registry = new Registry();
  private readonly requests: Counter<'backend' | 'model' | 'policy' | 'reason' | 'status'>;
  private readonly rejected: Counter<'code'>;
  private readonly ttft: Histogram<'backend' | 'model'>;
  private readonly duration: Histogram<'backend' | 'model' | 'stream'>;
  private readonly tokens: Counter<'backend' | 'model' | 'kind'>;
  private readonly decision: Histogram<'policy'>;
  private readonly matchRatio: Histogram<'policy'>;
  private readonly retries: Counter<'backend' | 'cause'>;
  private readonly streamErrors: Counter<'backend'>;
  private readonly clientAborts: Counter<'backend'>;
  private readonly clientConnectionsClosed: Counter<'reason'>;
  private readonly degradedTransitions: Counter<'to'>;
  private readonly reserveConflicts: Counter<'backend'>;
  private readonly failOpens: Counter<'model'>;
  private readonly cellSpills: Counter<'model'>;
  private readonly byteModeFallbacks: Counter<'reason'>;
  private readonly predictions: Counter<'backend' | 'outcome'>;
  private readonly predictedTokens: Counter<'backend'>;
  private readonly observedCachedTokens: Counter<'backend'>;
  private readonly confirmedTokens: Counter<'backend'>;
  private readonly feedbackModes: Gauge<'backend'>;
  private readonly retention: Gauge<'backend'>;
  private readonly learnedCostModel: Gauge<'pool' | 'figure'>;
  private readonly learnCalls: Counter<'result'>;
  private readonly responseOwnerWrites: Counter<'result'>;
  private readonly backendRestarts: Counter<'backend'>;
  private readonly discoveryFailures: Counter<'source'>;
  private readonly discoveryLeading: Gauge<'source'>;
  private readonly flowAdmitted: Counter<'model' | 'class' | 'queued'>;
  private readonly flowWait: Histogram<'model' | 'class'>;
  private readonly flowShed: Counter<'model' | 'class' | 'reason'>;
  private readonly pdRequests: Counter<'model' | 'mode' | 'reason'>;
  private readonly pdPrefillFailures: Counter<'backend' | 'cause'>;
  private readonly pdMalformedParams: Counter<'backend'>;
  private readonly loraLoads: Counter<'backend' | 'outcome'>;
  private readonly flowShared: Gauge;

  /** Where the scrape-time gauges read from; set by `readFrom` once the state and the backends exist (none until then). */
  private sources: RouterMetricsSources = {
    inflight: () => new Map(),
    breakerStates: () => new Map(),
    degraded: () => 0,
  };

  constructor() {
    const sources = (): RouterMetricsSources => this.sources;
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry, prefix: 'kvroute_router_' });
    registerBuildInfoGauge(this.registry);
    this.requests = new Counter({
      name: 'kvroute_router_requests_total',
      help: 'Requests routed, by chosen backend, model, policy, decision reason and response status.',
      labelNames: ['backend', 'model', 'policy', 'reason', 'status'],
      registers,
    });
    this.rejected = new Counter({
      name: 'kvroute_router_rejected_requests_total',
      help: 'Requests answered by the router itself with an error (bad input, no backend, upstream failure), by error code.',
      labelNames: ['code'],
      registers,
    });
    this.ttft = new Histogram({
      name: 'kvroute_router_time_to_first_token_seconds',
      help:
        'Streams only: time from request arrival to the first upstream event carrying output (text, ' +
        'reasoning or a tool call). A non-streaming response has no first token to see; its whole time ' +
        'is in kvroute_router_request_duration_seconds.',
      labelNames: ['backend', 'model'],
      buckets: LATENCY_BUCKETS_SECONDS,
      registers,
    });
    this.duration = new Histogram({
      name: 'kvroute_router_request_duration_seconds',
      help: 'Time from request arrival to the end of the relayed response (end to end), streamed or not.',
      labelNames: ['backend', 'model', 'stream'],
      buckets: DURATION_BUCKETS_SECONDS,
      registers,
    });
    this.tokens = new Counter({
      name: 'kvroute_router_tokens_total',
      help:
        "Tokens of responses that reported usage, by backend, model and kind: prompt (the engine's " +
        'prompt tokens), cached (of those, served from its prefix cache: usage.prompt_tokens_details.cached_tokens ' +
        "or its dialect's equivalent) and generated (completion tokens). Cache hit rate = cached / " +
        'prompt.',
      labelNames: ['backend', 'model', 'kind'],
      registers,
    });
    this.decision = new Histogram({
      name: 'kvroute_router_decision_duration_seconds',
      help: 'Time to decide where a request goes: routing text, hashes, state snapshot, policy and reservation.',
      labelNames: ['policy'],
      buckets: DECISION_BUCKETS_SECONDS,
      registers,
    });
    this.matchRatio = new Histogram({
      name: 'kvroute_router_prefix_match_ratio',
      help: 'Share of the request prefix blocks the chosen backend was believed to hold (0-1).',
      labelNames: ['policy'],
      buckets: [0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1],
      registers,
    });
    this.retries = new Counter({
      name: 'kvroute_router_retries_total',
      help: 'Tries that failed before the first byte and were retried on another backend, by failed backend and cause.',
      labelNames: ['backend', 'cause'],
      registers,
    });
    this.streamErrors = new Counter({
      name: 'kvroute_router_stream_errors_total',
      help: 'Upstream responses that failed after the first byte (ended with an error event).',
      labelNames: ['backend'],
      registers,
    });
    this.clientAborts = new Counter({
      name: 'kvroute_router_client_aborts_total',
      help: 'Requests whose client went away before the response ended (upstream aborted).',
      labelNames: ['backend'],
      registers,
    });
    this.clientConnectionsClosed = new Counter({
      name: 'kvroute_router_client_connections_closed_total',
      help:
        'Client connections the router closed itself, by reason: proxy_header (from a proxyProtocolFrom balancer ' +
        'without a valid PROXY header in time) and idle_for_room (an idle keep-alive connection closed so a new ' +
        'one fits under maxConnections or maxConnectionsPerPeer).',
      labelNames: ['reason'],
      registers,
    });
    new Gauge({
      name: 'kvroute_router_inflight_requests',
      help: 'Requests in flight per backend (leases held).',
      labelNames: ['backend'],
      registers,
      collect() {
        this.reset();
        for (const [backend, count] of sources().inflight()) this.set({ backend }, count);
      },
    });
    new Gauge({
      name: 'kvroute_router_state_degraded',
      help: '1 while the shared routing state (Redis) is unusable and this replica routes on its local state, else 0.',
      registers,
      collect() {
        this.set(sources().degraded());
      },
    });
    this.reserveConflicts = new Counter({
      name: 'kvroute_router_reserve_conflicts_total',
      help:
        'Reservations refused because the backend reached the in-flight cap the policy relied on (another ' +
        'replica got there first); the request was decided again.',
      labelNames: ['backend'],
      registers,
    });
    this.failOpens = new Counter({
      name: 'kvroute_router_health_fail_open_total',
      help: 'Tries routed on the circuit breakers alone because the health poller reported every available backend of the model unhealthy.',
      labelNames: ['model'],
      registers,
    });
    this.cellSpills = new Counter({
      name: 'kvroute_router_cell_spills_total',
      help: 'Decisions of a pool split into cells (poolCells) whose cell had every backend saturated, so the next cell decided too (a second script call).',
      labelNames: ['model'],
      registers,
    });
    this.byteModeFallbacks = new Counter({
      name: 'kvroute_router_byte_mode_fallbacks_total',
      help:
        'Requests of a model in token mode routed in byte mode all the same, by reason: template-failed (its chat ' +
        'template could not render the request), prompt-batch (a completion with several prompts), tokenizer-failed ' +
        "(the tokenizer's worker threads could not take it: their queue full, a worker gone).",
      labelNames: ['reason'],
      registers,
    });
    this.predictions = new Counter({
      name: 'kvroute_router_prefix_predictions_total',
      help:
        'Responses whose engine-reported cached tokens were checked against the prefix the router believed ' +
        'the backend held: confirmed, overpredicted (the engine held less), underpredicted (it held ' +
        'more), unverified (no cached_tokens reported).',
      labelNames: ['backend', 'outcome'],
      registers,
    });
    this.predictedTokens = new Counter({
      name: 'kvroute_router_prefix_predicted_tokens_total',
      help: 'Prompt tokens the router predicted the chosen backend would serve from its cache (verified responses only). Precision = confirmed / predicted.',
      labelNames: ['backend'],
      registers,
    });
    this.observedCachedTokens = new Counter({
      name: 'kvroute_router_prefix_observed_cached_tokens_total',
      help: 'Prompt tokens the backends reported serving from their cache (usage.prompt_tokens_details.cached_tokens). Recall = confirmed / observed.',
      labelNames: ['backend'],
      registers,
    });
    this.confirmedTokens = new Counter({
      name: 'kvroute_router_prefix_confirmed_tokens_total',
      help: 'min(predicted, observed) cached prompt tokens per response: the predicted tokens the engine confirmed.',
      labelNames: ['backend'],
      registers,
    });
    this.feedbackModes = new Gauge({
      name: 'kvroute_router_backend_reports_cached_tokens',
      help:
        "1 once a backend's responses have carried usage.prompt_tokens_details.cached_tokens (the router's " +
        'predictions for it are checked), 0 while none has (open loop: llama.cpp, SGLang or vLLM without ' +
        'the flag).',
      labelNames: ['backend'],
      registers,
    });
    this.retention = new Gauge({
      name: 'kvroute_router_backend_retention_seconds',
      help:
        "How long a backend's prefix entries are believed after their last recording, learned from " +
        "responses whose engine no longer held what the index predicted (its LRU's reach under the " +
        'load); absent until learned (entries then last the idle TTL).',
      labelNames: ['backend'],
      registers,
    });
    this.learnedCostModel = new Gauge({
      name: 'kvroute_router_cost_model_learned',
      help:
        "cacheaware's cost-model figures learned from responses, per pool: bytes_per_token (routing-text " +
        'bytes per engine token), prefill_seconds_per_token (per uncached token), queue_seconds_per_request ' +
        '(per request in flight ahead); used once backed by 20 samples.',
      labelNames: ['pool', 'figure'],
      registers,
    });
    this.learnCalls = new Counter({
      name: 'kvroute_router_learn_calls_total',
      help: 'Calls that wrote what responses taught (retention corrections, calibration batches) into the routing state, by result.',
      labelNames: ['result'],
      registers,
    });
    this.responseOwnerWrites = new Counter({
      name: 'kvroute_router_response_owner_writes_total',
      help:
        "Stored responses' owners written to the response-owner map, by result: ok, or failed (Redis " +
        'failed, too slow or degraded: only this replica knows the owner).',
      labelNames: ['result'],
      registers,
    });
    this.degradedTransitions = new Counter({
      name: 'kvroute_router_state_degraded_transitions_total',
      help: 'Switches into (to="degraded") and out of (to="shared") degraded mode.',
      labelNames: ['to'],
      registers,
    });
    new Gauge({
      name: 'kvroute_router_backend_role',
      help: "1 for each backend's prefill/decode role: prefill or decode (one leg of a disaggregated request), both (whole requests or either leg).",
      labelNames: ['backend', 'role'],
      registers,
      collect() {
        this.reset();
        for (const [backend, role] of sources().roles?.() ?? []) this.set({ backend, role }, 1);
      },
    });
    new Gauge({
      name: 'kvroute_router_cache_view',
      help:
        "1 for the way the router knows each backend's KV cache, 0 for the others: events (the engine's KV " +
        "events, followed by the poller), closed-loop (responses' cached tokens correct the router's record), " +
        'open-loop (the record is unchecked).',
      labelNames: ['backend', 'view'],
      registers,
      collect() {
        this.reset();
        for (const [backend, view] of sources().cacheViews?.() ?? [])
          for (const each of CACHE_VIEWS) this.set({ backend, view: each }, each === view ? 1 : 0);
      },
    });
    this.flowAdmitted = new Counter({
      name: 'kvroute_router_flow_admitted_total',
      help: 'Flow control: requests admitted to their pool, by model, priority class and whether they waited in the queue.',
      labelNames: ['model', 'class', 'queued'],
      registers,
    });
    this.pdRequests = new Counter({
      name: 'kvroute_router_pd_requests_total',
      help:
        'Prefill/decode: requests of a disaggregated model, by mode (disaggregated: a prefill leg then the decode leg; ' +
        'decode-only: the decode backend served it whole) and reason (cached-enough, prefill-failed, prefill-refused, ' +
        'no-prefill-backend).',
      labelNames: ['model', 'mode', 'reason'],
      registers,
    });
    this.pdPrefillFailures = new Counter({
      name: 'kvroute_router_pd_prefill_failures_total',
      help:
        'Prefill/decode: prefill legs that failed before their answer, by prefill backend and cause (connect, ' +
        'timeout, status: 5xx or 429, too-large, invalid-json).',
      labelNames: ['backend', 'cause'],
      registers,
    });
    this.pdMalformedParams = new Counter({
      name: 'kvroute_router_pd_malformed_params_total',
      help: 'Prefill/decode: prefill answers whose kv_transfer_params were unusable (taken as none: the decode backend prefilled locally), by prefill backend.',
      labelNames: ['backend'],
      registers,
    });
    this.loraLoads = new Counter({
      name: 'kvroute_router_lora_loads_total',
      help: 'LoRA adapters this replica loaded onto (or unloaded from) backends on demand, by backend and outcome (loaded, failed, unloaded).',
      labelNames: ['backend', 'outcome'],
      registers,
    });
    this.flowWait = new Histogram({
      name: 'kvroute_router_flow_queue_wait_seconds',
      help: 'Flow control: time an admitted request waited in the queue (0 for those admitted at once).',
      labelNames: ['model', 'class'],
      buckets: LATENCY_BUCKETS_SECONDS,
      registers,
    });
    this.flowShed = new Counter({
      name: 'kvroute_router_flow_shed_total',
      help:
        'Flow control: requests refused with 429 because their pool was saturated, by reason: queue-full, ' +
        'predicted-wait (could not start in time), deadline (waited the longest allowed).',
      labelNames: ['model', 'class', 'reason'],
      registers,
    });
    this.flowShared = new Gauge({
      name: 'kvroute_router_flow_shared',
      help: 'Flow control: 1 while the queues are shared in Redis (fair across replicas), 0 while this replica queues on its own.',
      registers,
    });
    new Gauge({
      name: 'kvroute_router_flow_queued_requests',
      help: 'Flow control: requests waiting in the queue on this replica, per model.',
      labelNames: ['model'],
      registers,
      collect() {
        this.reset();
        for (const [model, queue] of sources().flowQueues?.() ?? []) this.set({ model }, queue.requests);
      },
    });
    new Gauge({
      name: 'kvroute_router_flow_queued_bytes',
      help: 'Flow control: request body bytes held by waiting requests on this replica, per model.',
      labelNames: ['model'],
      registers,
      collect() {
        this.reset();
        for (const [model, queue] of sources().flowQueues?.() ?? []) this.set({ model }, queue.bytes);
      },
    });
    new Gauge({
      name: 'kvroute_router_backend_circuit_state',
      help: 'Circuit breaker state per backend: 0 closed, 1 half-open, 2 open.',
      labelNames: ['backend'],
      registers,
      collect() {
        this.reset();
        for (const [backend, state] of sources().breakerStates()) this.set({ backend }, state);
      },
    });
    this.backendRestarts = new Counter({
      name: 'kvroute_router_backend_restarts_total',
      help:
        'Engine restarts the health poller published that this replica handled, per backend: what the ' +
        'backend was believed to cache was forgotten in each of its pools.',
      labelNames: ['backend'],
      registers,
    });
    this.discoveryFailures = new Counter({
      name: 'kvroute_router_discovery_failures_total',
      help:
        'Looks at the backend discovery source that failed (DNS SERVFAIL or timeout, API server error), ' +
        'per source kind: the backends of the last good answer stayed.',
      labelNames: ['source'],
      registers,
    });
    this.discoveryLeading = new Gauge({
      name: 'kvroute_router_discovery_leader',
      help:
        "1 while this replica holds the discovery lease and applies what the source finds to the fleet's " +
        "backend set, else 0 (summed over the replicas: 1, or 0 for at most the lease's TTL).",
      labelNames: ['source'],
      registers,
    });
  }

  /** Per-request series are looked up once per label set: prom-client hashes the label object on every call otherwise. */
  private readonly children = new Map<string, MetricChild>();
  /**
   * Every series with a `backend` label, per backend: its children key (if cached) and the metric and
   * label set to remove. Backend ids of discovered pods (`name@IP:port`) change with every pod, so a
   * departed backend's series must go (forgetBackend), else /metrics and these maps grow forever.
   */
  private readonly seriesByBackend = new Map<
    string,
    Map<string, { readonly metric: RemovableMetric; readonly labels: SeriesLabels }>
  >();

  private child<T extends MetricChild>(key: string, create: () => T): T {
    let found = this.children.get(key) as T | undefined;
    if (!found) {
      found = create();
      this.children.set(key, found);
    }
    return found;
  }

  /**
   * A series labelled with a backend: cached as `child` does, and remembered for forgetBackend. The
   * labels are built only on a miss (a per-request recorder would otherwise allocate them every call).
   */
  private backendChild<T extends MetricChild>(
    key: string,
    metric: LabelledMetric<T>,
    labelsOf: () => SeriesLabels & { readonly backend: string },
  ): T {
    let found = this.children.get(key) as T | undefined;
    if (!found) {
      const labels = labelsOf();
      found = metric.labels(labels);
      this.children.set(key, found);
      this.track(key, metric, labels);
    }
    return found;
  }

  private track(key: string, metric: RemovableMetric, labels: SeriesLabels & { readonly backend: string }): void {
    let series = this.seriesByBackend.get(labels.backend);
    if (!series) {
      series = new Map();
      this.seriesByBackend.set(labels.backend, series);
    }
    series.set(key, { metric, labels });
  }

  /**
   * Removes every series labelled with `backend` (and their cached children). For a backend gone for
   * good, once its requests in flight have ended (one recorded afterwards would bring a series back).
   * The scrape-time gauges (in flight, circuit state) read the current backends and need nothing.
   */
  forgetBackend(backend: string): void {
    const series = this.seriesByBackend.get(backend);
    if (!series) return;
    this.seriesByBackend.delete(backend);
    for (const [key, { metric, labels }] of series) {
      this.children.delete(key);
      metric.remove(labels);
    }
  }

  /** `model`: a model the pool serves (the request's was checked against the backends' lists before routing), so bounded. */
  recordRouted(backend: string, model: string, policy: string, reason: string, status: number): void {
    this.backendChild(
      `r\u0000${backend}\u0000${model}\u0000${policy}\u0000${reason}\u0000${status}`,
      this.requests,
      () => ({ backend, model, policy, reason, status: String(status) }),
    ).inc();
  }

  recordRejected(code: string): void {
    this.rejected.inc({ code });
  }

  recordDecision(policy: string, seconds: number, matchRatio: number): void {
    this.child(`d\u0000${policy}`, () => this.decision.labels({ policy })).observe(seconds);
    this.child(`m\u0000${policy}`, () => this.matchRatio.labels({ policy })).observe(matchRatio);
  }

  /** A stream's first output (callers never pass a non-streaming response: its headers come with its end). */
  recordStreamTtft(backend: string, model: string, seconds: number): void {
    this.backendChild(`t\u0000${backend}\u0000${model}`, this.ttft, () => ({ backend, model })).observe(seconds);
  }

  recordDuration(backend: string, model: string, stream: boolean, seconds: number): void {
    this.backendChild(`e\u0000${backend}\u0000${model}\u0000${stream}`, this.duration, () => ({
      backend,
      model,
      stream: stream ? 'true' : 'false',
    })).observe(seconds);
  }

  /** A response's usage: prompt, cached (when the engine reports it) and generated tokens (when it reports them). */
  recordTokens(backend: string, model: string, usage: ResponseUsage): void {
    this.backendChild(`k\u0000${backend}\u0000${model}\u0000p`, this.tokens, () => ({
      backend,
      model,
      kind: 'prompt',
    })).inc(usage.promptTokens);
    if (usage.cachedTokens !== null)
      this.backendChild(`k\u0000${backend}\u0000${model}\u0000c`, this.tokens, () => ({
        backend,
        model,
        kind: 'cached',
      })).inc(usage.cachedTokens);
    if (usage.completionTokens != null)
      this.backendChild(`k\u0000${backend}\u0000${model}\u0000g`, this.tokens, () => ({
        backend,
        model,
        kind: 'generated',
      })).inc(usage.completionTokens);
  }

  recordRetry(backend: string, cause: string): void {
    this.backendChild(`y\u0000${backend}\u0000${cause}`, this.retries, () => ({ backend, cause })).inc();
  }

  recordStreamError(backend: string): void {
    this.backendChild(`s\u0000${backend}`, this.streamErrors, () => ({ backend })).inc();
  }

  recordReserveConflict(backend: string): void {
    this.backendChild(`c\u0000${backend}`, this.reserveConflicts, () => ({ backend })).inc();
  }

  recordFailOpen(model: string): void {
    this.failOpens.inc({ model });
  }

  recordCellSpill(model: string): void {
    this.cellSpills.inc({ model });
  }

  recordByteModeFallback(reason: ByteModeFallback): void {
    this.byteModeFallbacks.inc({ reason });
  }

  /** Whether `backend` has been seen reporting cached tokens (its feedback mode). */
  recordFeedbackMode(backend: string, reportsCachedTokens: boolean): void {
    this.backendChild(`f\u0000${backend}`, this.feedbackModes, () => ({ backend })).set(reportsCachedTokens ? 1 : 0);
  }

  recordPrediction(backend: string, check: PredictionCheck): void {
    this.backendChild(`p\u0000${backend}\u0000${check.outcome}`, this.predictions, () => ({
      backend,
      outcome: check.outcome,
    })).inc();
    if (check.outcome === 'unverified') return;
    this.backendChild(`pt\u0000${backend}`, this.predictedTokens, () => ({ backend })).inc(check.predictedTokens);
    this.backendChild(`ot\u0000${backend}`, this.observedCachedTokens, () => ({ backend })).inc(check.observedTokens);
    this.backendChild(`ct\u0000${backend}`, this.confirmedTokens, () => ({ backend })).inc(check.confirmedTokens);
  }

  recordRetention(backend: string, retentionMs: number): void {
    this.backendChild(`n\u0000${backend}`, this.retention, () => ({ backend })).set(retentionMs / 1000);
  }

  recordLearnedCostModel(pool: string, learned: LearnedCalibration): void {
    const { bytesPerToken, prefillMsPerToken, queueMsPerRequest } = learned;
    if (bytesPerToken) this.learnedCostModel.set({ pool, figure: 'bytes_per_token' }, bytesPerToken.value);
    if (prefillMsPerToken)
      this.learnedCostModel.set({ pool, figure: 'prefill_seconds_per_token' }, prefillMsPerToken.value / 1000);
    if (queueMsPerRequest)
      this.learnedCostModel.set({ pool, figure: 'queue_seconds_per_request' }, queueMsPerRequest.value / 1000);
  }

  recordLearnCall(ok: boolean): void {
    this.learnCalls.inc({ result: ok ? 'ok' : 'failed' });
  }

  recordResponseOwnerWrite(ok: boolean): void {
    const result = ok ? 'ok' : 'failed';
    this.child(`w\u0000${result}`, () => this.responseOwnerWrites.labels({ result })).inc();
  }

  /** The gauges read these at scrape time. */
  readFrom(sources: RouterMetricsSources): void {
    this.sources = sources;
  }

  recordDegradedChange(degraded: boolean): void {
    this.degradedTransitions.inc({ to: degraded ? 'degraded' : 'shared' });
  }

  recordClientConnectionClosed(reason: 'proxy_header' | 'idle_for_room'): void {
    this.clientConnectionsClosed.inc({ reason });
  }

  recordClientAbort(backend: string): void {
    this.backendChild(`a\u0000${backend}`, this.clientAborts, () => ({ backend })).inc();
  }

  recordBackendRestart(backend: string): void {
    this.backendChild(`b\u0000${backend}`, this.backendRestarts, () => ({ backend })).inc();
  }

  recordDiscoveryFailure(source: string): void {
    this.discoveryFailures.inc({ source });
  }

  setDiscoveryLeading(source: string, leading: boolean): void {
    this.discoveryLeading.set({ source }, leading ? 1 : 0);
  }

  recordFlowAdmitted(model: string, priorityClass: number, queued: boolean, waitSeconds: number): void {
    const labels = { model, class: FLOW_CLASSES[priorityClass] ?? 'normal' };
    this.flowAdmitted.inc({ ...labels, queued: queued ? 'true' : 'false' });
    this.flowWait.observe(labels, waitSeconds);
  }

  recordFlowShed(model: string, priorityClass: number, reason: string): void {
    this.flowShed.inc({ model, class: FLOW_CLASSES[priorityClass] ?? 'normal', reason });
  }

  recordFlowShared(shared: boolean): void {
    this.flowShared.set(shared ? 1 : 0);
  }

  recordDisaggregation(model: string, mode: 'disaggregated' | 'decode-only', reason: string): void {
    this.pdRequests.inc({ model, mode, reason });
  }

  recordPrefillFailure(backend: string, cause: string): void {
    this.backendChild(`pf\u0000${backend}\u0000${cause}`, this.pdPrefillFailures, () => ({ backend, cause })).inc();
  }

  recordMalformedPrefillParams(backend: string): void {
    this.backendChild(`pm\u0000${backend}`, this.pdMalformedParams, () => ({ backend })).inc();
  }

  recordAdapterLoad(backend: string, outcome: 'loaded' | 'failed' | 'unloaded'): void {
    this.backendChild(`ll\u0000${backend}\u0000${outcome}`, this.loraLoads, () => ({ backend, outcome })).inc();
  }
}
