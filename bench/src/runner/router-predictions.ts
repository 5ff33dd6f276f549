/**
 * The routers' own account of their accuracy over a run: every router replica's prediction counters
 * (apps/router's router-metrics.ts), scraped from its `/metrics` before and after the run and summed
 * over backends and replicas as deltas (a router that is not fresh, e.g. a deployment, has counted
 * earlier traffic; one whose counter went down restarted and counts from zero):
 *
 *   kvroute_router_prefix_predicted_tokens_total{backend}          tokens predicted cached
 *   kvroute_router_prefix_observed_cached_tokens_total{backend}    tokens the engine reported cached
 *   kvroute_router_prefix_confirmed_tokens_total{backend}          min(predicted, observed) per response
 *   kvroute_router_prefix_predictions_total{backend,outcome}       responses by outcome
 *
 * Precision = confirmed ÷ predicted, recall = confirmed ÷ observed (report/summary.ts). A router that
 * does not export these families (the bench's oracles, another proxy) gives no figures, not zeros.
 */
import type { Agent } from 'undici';
import { request } from 'undici';
import { parsePrometheusText } from '@kvroute/engine-metrics';
import type { PredictionTotals } from '../report';

export const PREDICTION_METRICS = {
  predictedTokens: 'kvroute_router_prefix_predicted_tokens_total',
  observedTokens: 'kvroute_router_prefix_observed_cached_tokens_total',
  confirmedTokens: 'kvroute_router_prefix_confirmed_tokens_total',
  predictions: 'kvroute_router_prefix_predictions_total',
  learnedCostModel: 'kvroute_router_cost_model_learned',
} as const;

/**
 * The prediction counters of one router's /metrics text, summed over backends; null when the text does
 * not declare them (not a kvroute router). Declared but never incremented = zeros.
 */
export function predictionTotalsOf(text: string): PredictionTotals | null {
  // The project's one Prometheus text parser (libs/engine-metrics).
  const exposition = parsePrometheusText(text);
  if (exposition.metadata.get(PREDICTION_METRICS.predictions)?.type !== 'counter') return null;
  let predictedTokens = 0;
  let observedTokens = 0;
  let confirmedTokens = 0;
  const predictions: Record<string, number> = {};
  const learned: number[] = [];
  for (const sample of exposition.samples) {
    if (sample.name === PREDICTION_METRICS.learnedCostModel && sample.labels['figure'] === 'bytes_per_token')
      learned.push(sample.value);
    else if (sample.name === PREDICTION_METRICS.predictedTokens) predictedTokens += sample.value;
    else if (sample.name === PREDICTION_METRICS.observedTokens) observedTokens += sample.value;
    else if (sample.name === PREDICTION_METRICS.confirmedTokens) confirmedTokens += sample.value;
    else if (sample.name === PREDICTION_METRICS.predictions) {
      const outcome = sample.labels['outcome'] ?? 'unknown';
      predictions[outcome] = (predictions[outcome] ?? 0) + sample.value;
    }
  }
  return { predictedTokens, observedTokens, confirmedTokens, predictions, ...learnedOf(learned) };
}

/** `{ learnedBytesPerToken }` as the mean of `values`, or nothing when there are none. */
function learnedOf(values: readonly number[]): { learnedBytesPerToken?: number } {
  return values.length === 0
    ? {}
    : { learnedBytesPerToken: values.reduce((sum, value) => sum + value, 0) / values.length };
}

/** after − before, per figure; a figure that went down (the router restarted) counts from zero. */
export function predictionDelta(before: PredictionTotals | null, after: PredictionTotals): PredictionTotals {
  const minus = (end: number, begin: number | undefined): number =>
    begin === undefined || end < begin ? end : end - begin;
  const predictions: Record<string, number> = {};
  for (const [outcome, count] of Object.entries(after.predictions))
    predictions[outcome] = minus(count, before?.predictions[outcome]);
  return {
    predictedTokens: minus(after.predictedTokens, before?.predictedTokens),
    observedTokens: minus(after.observedTokens, before?.observedTokens),
    confirmedTokens: minus(after.confirmedTokens, before?.confirmedTokens),
    predictions,
    // A gauge: its value at the end, not a difference.
    ...(after.learnedBytesPerToken === undefined ? {} : { learnedBytesPerToken: after.learnedBytesPerToken }),
  };
}

/** Σ over replicas. */
export function sumPredictionTotals(totals: readonly PredictionTotals[]): PredictionTotals {
  const predictions: Record<string, number> = {};
  for (const total of totals)
    for (const [outcome, count] of Object.entries(total.predictions))
      predictions[outcome] = (predictions[outcome] ?? 0) + count;
  return {
    predictedTokens: totals.reduce((sum, total) => sum + total.predictedTokens, 0),
    observedTokens: totals.reduce((sum, total) => sum + total.observedTokens, 0),
    confirmedTokens: totals.reduce((sum, total) => sum + total.confirmedTokens, 0),
    predictions,
    ...learnedOf(
      totals.flatMap((total) => (total.learnedBytesPerToken === undefined ? [] : [total.learnedBytesPerToken])),
    ),
  };
}

export function predictionCount(totals: PredictionTotals): number {
  return Object.values(totals.predictions).reduce((sum, count) => sum + count, 0);
}

/** Each router's prediction counters (null: no answer, or not a kvroute router), in `routerUrls` order. */
export async function scrapePredictionCounters(
  agent: Agent,
  routerUrls: readonly string[],
): Promise<(PredictionTotals | null)[]> {
  return Promise.all(
    routerUrls.map(async (url) => {
      try {
        const response = await request(new URL('/metrics', url), {
          dispatcher: agent,
          headersTimeout: 5_000,
          bodyTimeout: 5_000,
        });
        const text = await response.body.text();
        return response.statusCode === 200 ? predictionTotalsOf(text) : null;
      } catch {
        return null;
      }
    }),
  );
}

/**
 * The run's prediction totals: after − before per router, summed over the routers that export the
 * counters; undefined when none does. The routers count a response once they have relayed its end, a
 * moment after the client read it, so the scrape is repeated (every 50 ms, up to `settleMs`) until
 * they count `expectedPredictions` (the run's successful responses).
 */
export async function runPredictionTotals(
  agent: Agent,
  routerUrls: readonly string[],
  before: readonly (PredictionTotals | null)[],
  options: {
    readonly expectedPredictions: number;
    readonly settleMs?: number;
    readonly sleep?: (ms: number) => Promise<void>;
  },
): Promise<PredictionTotals | undefined> {
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  const deadline = performance.now() + (options.settleMs ?? 1_000);
  for (;;) {
    const after = await scrapePredictionCounters(agent, routerUrls);
    const deltas = after.flatMap((totals, index) =>
      totals === null ? [] : [predictionDelta(before[index] ?? null, totals)],
    );
    if (deltas.length === 0) return undefined;
    const sum = sumPredictionTotals(deltas);
    if (predictionCount(sum) >= options.expectedPredictions || performance.now() >= deadline) return sum;
    await sleep(50);
  }
}
