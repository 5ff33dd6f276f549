import type { EngineKind, EngineMetrics, EngineMetricsOptions } from '@kvroute/engine-metrics';
import type { ScrapeFailureCause } from '@kvroute/protocols';
import { ScrapeRequestError, type HttpAnswer, type HttpGet } from './http-get';

/** `/metrics` text (and llama.cpp's parsed `/slots`) → normalised figures; `parseEngineMetrics` of @kvroute/engine-metrics. */
export type ParseEngineMetrics = (text: string, options: EngineMetricsOptions) => EngineMetrics;

export interface ScrapeTarget {
  /** Base URL of the engine. */
  readonly url: string;
  /** The engine when known (configured, or seen at the previous scrape); null = tell from /metrics. */
  readonly engine: EngineKind | null;
}

export interface ScrapeOutcome {
  /** The health endpoint answered 200 in time: what the health hysteresis counts. */
  readonly healthPassed: boolean;
  /** First cause of failure, the health probe's before the metrics read's; null = all went well. */
  readonly failure: ScrapeFailureCause | null;
  /** The figures read from /metrics; null when it could not be read. */
  readonly metrics: EngineMetrics | null;
}

export interface ScrapeDeps {
  readonly get: HttpGet;
  readonly parse: ParseEngineMetrics;
}

type Settled =
  | { readonly ok: true; readonly answer: HttpAnswer }
  | { readonly ok: false; readonly cause: ScrapeFailureCause };

/**
 * One scrape of one backend: `GET /health` and `GET /metrics` at once (plus `GET /slots` for llama.cpp,
 * whose `/metrics` has no KV capacity). All three engines answer `/health` with 200 when they serve;
 * vLLM, SGLang and llama.cpp answer 503 while loading a model (llama.cpp: "Loading model") or when the
 * engine died, which counts as `loading`. A backend whose engine is not known yet and turns out to be
 * llama.cpp gets its `/slots` read after `/metrics` (once: the caller remembers the engine).
 */
export async function scrapeBackend(target: ScrapeTarget, deps: ScrapeDeps): Promise<ScrapeOutcome> {
  const base = target.url.replace(/\/+$/, '');
  const withSlots = target.engine === 'llamacpp';
  const [health, metrics, slots] = await Promise.all([
    settle(deps.get(`${base}/health`)),
    settle(deps.get(`${base}/metrics`)),
    withSlots ? settle(deps.get(`${base}/slots`)) : Promise.resolve(null),
  ]);

  const healthFailure: ScrapeFailureCause | null = !health.ok
    ? health.cause
    : health.answer.status === 200
      ? null
      : health.answer.status === 503
        ? 'loading'
        : 'health_status';

  let metricsFailure: ScrapeFailureCause | null = null;
  let figures: EngineMetrics | null = null;
  if (!metrics.ok) metricsFailure = metrics.cause;
  else if (metrics.answer.status !== 200) metricsFailure = 'metrics_status';
  else {
    const text = metrics.answer.body;
    const engine = target.engine ?? undefined;
    try {
      figures = deps.parse(text, { engine, llamaCppSlots: slotsBody(slots) });
      if (figures.engine === 'llamacpp' && !withSlots) {
        figures = deps.parse(text, {
          engine: 'llamacpp',
          llamaCppSlots: slotsBody(await settle(deps.get(`${base}/slots`))),
        });
      }
    } catch {
      metricsFailure = 'unreadable';
    }
  }
  return { healthPassed: healthFailure === null, failure: healthFailure ?? metricsFailure, metrics: figures };
}

async function settle(pending: Promise<HttpAnswer>): Promise<Settled> {
  try {
    return { ok: true, answer: await pending };
  } catch (error) {
    return { ok: false, cause: error instanceof ScrapeRequestError ? error.kind : 'connect' };
  }
}

/** The parsed `/slots` body, or undefined when there is none to read (not asked, failed, not JSON). */
function slotsBody(slots: Settled | null): unknown {
  if (slots === null || !slots.ok || slots.answer.status !== 200) return undefined;
  try {
    return JSON.parse(slots.answer.body) as unknown;
  } catch {
    return undefined;
  }
}
