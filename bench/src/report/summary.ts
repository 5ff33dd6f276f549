import { mean, percentile } from '@kvroute/workloads';

/**
 * Pure part of the benchmark report (issue 6, "Reports"; issue 13, honest references and accuracy):
 * the runner's typed results in, per sweep point × policy figures out (mean ± stddev over seeds), plus
 * the TTFT slope, ratios to the best baseline, each policy's hit rate as a share of the oracle's and of
 * the compulsory-miss bound, and the routers' prediction precision and recall. Rendering is in
 * render.ts / html.ts.
 */

/** One request as the runner saw it. */
export interface RequestRecord {
  /** Streaming: time to the first content token; undefined when none came (error, empty reply). */
  readonly ttftMs?: number;
  readonly e2eMs: number;
  readonly itlMs: readonly number[];
  /** HTTP status; 0 for a transport error. 2xx counts as success. */
  readonly status: number;
  readonly backend?: string;
  readonly reason?: string;
  readonly promptTokens: number;
  /** `usage.prompt_tokens_details.cached_tokens`; undefined when the backend does not report it. */
  readonly cachedTokens?: number;
  /** UTF-8 bytes of the prompt's text (message contents, text parts; completions: the prompt), as sent. */
  readonly promptTextBytes?: number;
}

/** Backend-side truth: deltas of `vllm:prefix_cache_hits_total` / `queries_total` over the run. */
export interface BackendTruth {
  readonly backend: string;
  readonly prefixCacheHitsDelta: number;
  readonly prefixCacheQueriesDelta: number;
}

/**
 * The routers' prediction counters over one run, summed over backends and router replicas (deltas of
 * `kvroute_router_prefix_*_total`): what the router believed the chosen backend held against what the
 * engine reported serving from its cache. Absent for routers that do not export them (the oracles).
 */
export interface PredictionTotals {
  /** Σ kvroute_router_prefix_predicted_tokens_total: tokens predicted cached (verified responses). */
  readonly predictedTokens: number;
  /** Σ kvroute_router_prefix_observed_cached_tokens_total: tokens the engines reported cached. */
  readonly observedTokens: number;
  /** Σ kvroute_router_prefix_confirmed_tokens_total: min(predicted, observed) per response. */
  readonly confirmedTokens: number;
  /** Σ kvroute_router_prefix_predictions_total by outcome (confirmed, overpredicted, underpredicted, unverified). */
  readonly predictions: Readonly<Record<string, number>>;
  /**
   * The routers' learned bytes per token at the end of the run (kvroute_router_cost_model_learned,
   * figure bytes_per_token; mean over replicas and pools), to hold against the prompts' own ratio.
   */
  readonly learnedBytesPerToken?: number;
}

export interface SeedRun {
  readonly seed: number;
  /** Wall duration of the run, ms (RPS = successful requests ÷ this). */
  readonly wallMs: number;
  readonly requests: readonly RequestRecord[];
  readonly backends?: readonly BackendTruth[];
  readonly prediction?: PredictionTotals;
}

/**
 * The compulsory-miss bound of one workload and seed: the run's requests replayed one at a time, in
 * order, through one vllm-sim whose KV cache never evicts (a cache pooled over the fleet and
 * infinite), with the sims' own tokenisation, 16-token blocks and hit counting. Σ cached ÷ Σ prompt
 * tokens of its responses is the most reuse any placement can get: every block some earlier request
 * already had is a hit, and only first sightings miss. Computed once per workload and seed (it does
 * not depend on the policy); see runner/compulsory-bound.ts.
 */
export interface SeedBound {
  readonly seed: number;
  /** Requests replayed, and how many of them failed (their tokens are left out). */
  readonly requests: number;
  readonly failed: number;
  /** Σ prompt tokens and Σ cached tokens of the successful replayed requests. */
  readonly promptTokens: number;
  readonly cachedTokens: number;
  /** Blocks the replay sim evicted (0 when its cache was indeed infinite for this workload; else the figure is not a bound). */
  readonly evictedBlocks: number;
  /** KV blocks the replay sim had. */
  readonly numGpuBlocks: number;
}

export interface PolicyRuns {
  readonly policy: string;
  readonly runs: readonly SeedRun[];
}

export interface SweepPoint {
  /** Value of the sweep variable (e.g. 8 sessions). */
  readonly value: number;
  readonly policies: readonly PolicyRuns[];
  /** The compulsory-miss bound per seed (local runs; absent where it cannot be computed). */
  readonly bound?: readonly SeedBound[];
}

export interface ScenarioResults {
  readonly scenario: string;
  /** Name of the sweep variable, e.g. `sessions`. */
  readonly sweepVariable: string;
  /** In sweep order (first → last is the slope's span). */
  readonly points: readonly SweepPoint[];
}

export const BASELINE_POLICIES = ['roundrobin', 'leastloaded'] as const;
export const ORACLE_POLICY = 'oracle';
export const ORACLE_COST_POLICY = 'oracle-cost';
/** The bench-side routers (bench/src/oracle): they need the sims' /sim/match, and are not kvroute routers. */
export const ORACLE_POLICIES: readonly string[] = [ORACLE_POLICY, ORACLE_COST_POLICY];

/** Figures of one seed's run. */
export interface SeedFigures {
  /** 100 × Σ cached ÷ Σ prompt tokens over successful requests (a request without the field counts 0 when others report it). */
  readonly kvHitPct?: number;
  /** 100 × Σ hits ÷ Σ queries from the backends' counters. */
  readonly backendHitPct?: number;
  readonly ttftP50Ms?: number;
  readonly ttftP95Ms?: number;
  readonly ttftP99Ms?: number;
  readonly e2eP50Ms?: number;
  readonly rps: number;
  readonly errors: number;
  readonly requests: number;
  /** 100 × Σ confirmed ÷ Σ predicted tokens (the routers' counters); undefined without counters or predictions. */
  readonly precisionPct?: number;
  /** 100 × Σ confirmed ÷ Σ observed cached tokens. */
  readonly recallPct?: number;
  /** 100 × unverified ÷ all predictions (responses whose engine reported no cached tokens). */
  readonly unverifiedPct?: number;
}

/** Mean and sample standard deviation (n − 1; 0 for one seed) over the seeds that have the figure. */
export interface Stat {
  readonly mean: number;
  readonly stddev: number;
  readonly n: number;
}

export interface PolicySummary {
  readonly policy: string;
  readonly seeds: number;
  readonly kvHitPct?: Stat;
  readonly backendHitPct?: Stat;
  readonly ttftP50Ms?: Stat;
  readonly ttftP95Ms?: Stat;
  readonly ttftP99Ms?: Stat;
  readonly e2eP50Ms?: Stat;
  readonly rps?: Stat;
  readonly errors?: Stat;
  readonly precisionPct?: Stat;
  readonly recallPct?: Stat;
  readonly unverifiedPct?: Stat;
  /** Mean TTFT p50 / p95 / p99 ÷ the best baseline's (undefined for no baseline). */
  readonly vsBaseline?: { readonly ttftP50?: number; readonly ttftP95?: number; readonly ttftP99?: number };
  /** 100 × mean hit % ÷ the oracle's (token-based and backend-counter-based). */
  readonly kvHitPctOfOracle?: number;
  readonly backendHitPctOfOracle?: number;
  /** 100 × mean hit % (KV hit %, else backend hit %) ÷ the mean compulsory-miss bound. */
  readonly hitPctOfBound?: number;
}

export interface PointSummary {
  readonly value: number;
  /** The baseline with the lowest mean TTFT p50 at this point, if any ran. */
  readonly baseline?: string;
  readonly policies: readonly PolicySummary[];
  /** The compulsory-miss bound, % of prompt tokens, over seeds (seeds whose replay evicted are left out). */
  readonly bound?: Stat;
}

export interface SlopeSummary {
  readonly policy: string;
  /** (mean TTFT p50 at the last point − at the first) ÷ (last value − first value), ms per sweep unit. */
  readonly ttftP50MsPerUnit?: number;
  readonly ttftP95MsPerUnit?: number;
  /** The same for e2e p50: the slope of what the seed's tables call "TTFT" (non-streaming). */
  readonly e2eP50MsPerUnit?: number;
}

export interface ReportSummary {
  readonly scenario: string;
  readonly sweepVariable: string;
  readonly points: readonly PointSummary[];
  readonly slopes: readonly SlopeSummary[];
}

function isOk(request: RequestRecord): boolean {
  return request.status >= 200 && request.status < 300;
}

function pct(values: readonly number[], p: number): number | undefined {
  return values.length === 0 ? undefined : percentile(values, p);
}

export function seedFigures(run: SeedRun): SeedFigures {
  const ok = run.requests.filter(isOk);
  const ttfts = ok.flatMap((request) => (request.ttftMs === undefined ? [] : [request.ttftMs]));
  // vLLM leaves `prompt_tokens_details` out when nothing was cached (unless told otherwise): once any
  // request of the run reports cached tokens, a request without the field had none.
  const withCached = ok.some((request) => request.cachedTokens !== undefined) ? ok : [];
  const promptTokens = withCached.reduce((sum, request) => sum + request.promptTokens, 0);
  const cachedTokens = withCached.reduce((sum, request) => sum + (request.cachedTokens ?? 0), 0);
  const queries = (run.backends ?? []).reduce((sum, backend) => sum + backend.prefixCacheQueriesDelta, 0);
  const hits = (run.backends ?? []).reduce((sum, backend) => sum + backend.prefixCacheHitsDelta, 0);
  const prediction = run.prediction;
  const predictions = prediction ? Object.values(prediction.predictions).reduce((sum, count) => sum + count, 0) : 0;
  return {
    kvHitPct: promptTokens > 0 ? (100 * cachedTokens) / promptTokens : undefined,
    backendHitPct: queries > 0 ? (100 * hits) / queries : undefined,
    ttftP50Ms: pct(ttfts, 50),
    ttftP95Ms: pct(ttfts, 95),
    ttftP99Ms: pct(ttfts, 99),
    e2eP50Ms: pct(
      ok.map((request) => request.e2eMs),
      50,
    ),
    rps: run.wallMs > 0 ? ok.length / (run.wallMs / 1000) : 0,
    errors: run.requests.length - ok.length,
    requests: run.requests.length,
    precisionPct: prediction ? percentOf(prediction.confirmedTokens, prediction.predictedTokens) : undefined,
    recallPct: prediction ? percentOf(prediction.confirmedTokens, prediction.observedTokens) : undefined,
    unverifiedPct: prediction ? percentOf(prediction.predictions['unverified'] ?? 0, predictions) : undefined,
  };
}

/** The bound of one seed, % of prompt tokens; undefined when nothing succeeded or the replay cache evicted (then it bounds nothing). */
export function boundPct(bound: SeedBound): number | undefined {
  if (bound.evictedBlocks > 0) return undefined;
  return percentOf(bound.cachedTokens, bound.promptTokens);
}

/** Mean ± sample stddev of the defined values; undefined when there are none. */
export function stat(values: readonly (number | undefined)[]): Stat | undefined {
  const defined = values.filter((value): value is number => value !== undefined && Number.isFinite(value));
  if (defined.length === 0) return undefined;
  const m = mean(defined);
  const variance =
    defined.length < 2 ? 0 : defined.reduce((sum, value) => sum + (value - m) ** 2, 0) / (defined.length - 1);
  return { mean: m, stddev: Math.sqrt(variance), n: defined.length };
}

/** a ÷ b, undefined when either is missing or b is not positive. */
export function ratio(a: number | undefined, b: number | undefined): number | undefined {
  if (a === undefined || b === undefined || !Number.isFinite(a) || !Number.isFinite(b) || b <= 0) return undefined;
  return a / b;
}

function summarizePolicy(policy: PolicyRuns): PolicySummary {
  const figures = policy.runs.map(seedFigures);
  const of = (key: Exclude<keyof SeedFigures, 'requests'>): Stat | undefined =>
    stat(figures.map((figure) => figure[key]));
  return {
    policy: policy.policy,
    seeds: policy.runs.length,
    kvHitPct: of('kvHitPct'),
    backendHitPct: of('backendHitPct'),
    ttftP50Ms: of('ttftP50Ms'),
    ttftP95Ms: of('ttftP95Ms'),
    ttftP99Ms: of('ttftP99Ms'),
    e2eP50Ms: of('e2eP50Ms'),
    rps: of('rps'),
    errors: of('errors'),
    precisionPct: of('precisionPct'),
    recallPct: of('recallPct'),
    unverifiedPct: of('unverifiedPct'),
  };
}

export function summarizePoint(point: SweepPoint): PointSummary {
  const raw = point.policies.map(summarizePolicy);
  const baselines = raw.filter(
    (summary) => (BASELINE_POLICIES as readonly string[]).includes(summary.policy) && summary.ttftP50Ms !== undefined,
  );
  const baseline = baselines.reduce<PolicySummary | undefined>(
    (best, summary) => (!best || summary.ttftP50Ms!.mean < best.ttftP50Ms!.mean ? summary : best),
    undefined,
  );
  const oracle = raw.find((summary) => summary.policy === ORACLE_POLICY);
  const bound = stat((point.bound ?? []).map(boundPct));
  const policies = raw.map((summary) => ({
    ...summary,
    vsBaseline: baseline
      ? {
          ttftP50: ratio(summary.ttftP50Ms?.mean, baseline.ttftP50Ms?.mean),
          ttftP95: ratio(summary.ttftP95Ms?.mean, baseline.ttftP95Ms?.mean),
          ttftP99: ratio(summary.ttftP99Ms?.mean, baseline.ttftP99Ms?.mean),
        }
      : undefined,
    kvHitPctOfOracle: oracle ? percentOf(summary.kvHitPct?.mean, oracle.kvHitPct?.mean) : undefined,
    backendHitPctOfOracle: oracle ? percentOf(summary.backendHitPct?.mean, oracle.backendHitPct?.mean) : undefined,
    hitPctOfBound: bound ? percentOf((summary.kvHitPct ?? summary.backendHitPct)?.mean, bound.mean) : undefined,
  }));
  return { value: point.value, baseline: baseline?.policy, policies, ...(bound ? { bound } : {}) };
}

function percentOf(a: number | undefined, b: number | undefined): number | undefined {
  const value = ratio(a, b);
  return value === undefined ? undefined : 100 * value;
}

/** Policies in order of first appearance over the sweep. */
export function policyOrder(
  points: readonly { readonly policies: readonly { readonly policy: string }[] }[],
): string[] {
  const order: string[] = [];
  for (const point of points) for (const { policy } of point.policies) if (!order.includes(policy)) order.push(policy);
  return order;
}

/** Slope of a figure's mean between the first and the last sweep point, per sweep unit. */
export function slope(first: { value: number; y?: number }, last: { value: number; y?: number }): number | undefined {
  if (first.y === undefined || last.y === undefined || last.value === first.value) return undefined;
  return (last.y - first.y) / (last.value - first.value);
}

export function summarize(results: ScenarioResults): ReportSummary {
  const points = results.points.map(summarizePoint);
  const first = points[0];
  const last = points[points.length - 1];
  const find = (point: PointSummary | undefined, policy: string): PolicySummary | undefined =>
    point?.policies.find((summary) => summary.policy === policy);
  const slopes = policyOrder(points).map((policy) => {
    const a = find(first, policy);
    const b = find(last, policy);
    if (!first || !last) return { policy };
    return {
      policy,
      ttftP50MsPerUnit: slope(
        { value: first.value, y: a?.ttftP50Ms?.mean },
        { value: last.value, y: b?.ttftP50Ms?.mean },
      ),
      ttftP95MsPerUnit: slope(
        { value: first.value, y: a?.ttftP95Ms?.mean },
        { value: last.value, y: b?.ttftP95Ms?.mean },
      ),
      e2eP50MsPerUnit: slope({ value: first.value, y: a?.e2eP50Ms?.mean }, { value: last.value, y: b?.e2eP50Ms?.mean }),
    };
  });
  return { scenario: results.scenario, sweepVariable: results.sweepVariable, points, slopes };
}
