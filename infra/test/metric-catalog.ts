/**
 * Every metric series name the stack's dashboards and alerts may use, from the apps' own definitions:
 * the router's and the poller's prom-client registries (RouterMetrics, PollerMetrics, built as the apps
 * build them) and the `/metrics` text of a vllm-sim in the vLLM dialect (the names vLLM itself
 * exports, which the gpu profile's real engines serve), and the few Redis exporter series the alerts
 * read (REDIS_EXPORTER_SERIES). Histograms contribute `_bucket`, `_sum` and
 * `_count` series, not their bare name, as Prometheus stores them.
 */
import { PollerMetrics } from '@kvroute/health-poller/metrics';
import { RouterMetrics } from '@kvroute/router/metrics';
import { createSimServer } from '@kvroute/vllm-sim';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { parsePromql } from './promql';

export type MetricSource = 'router' | 'poller' | 'backend' | 'redis' | 'prometheus';

export interface MetricCatalog {
  /** Series name → where it comes from. */
  readonly series: ReadonlyMap<string, MetricSource>;
  /**
   * Series name → its label names, for the router's and the poller's series (the engines' are the
   * engines' business); without the target labels Prometheus adds to every series (TARGET_LABELS).
   */
  readonly labels: ReadonlyMap<string, ReadonlySet<string>>;
}

/** Labels Prometheus attaches to every series of a target. */
export const TARGET_LABELS: ReadonlySet<string> = new Set(['job', 'instance']);

/** Label names of every series of a prom-client registry (a histogram's `_bucket` adds `le`). */
function registryLabels(
  registry: { getMetricsAsArray(): Array<{ name: string; labelNames?: readonly string[] }> },
  into: Map<string, ReadonlySet<string>>,
): void {
  for (const metric of registry.getMetricsAsArray()) {
    const names = new Set(metric.labelNames ?? []);
    for (const series of [metric.name, `${metric.name}_sum`, `${metric.name}_count`]) into.set(series, names);
    into.set(`${metric.name}_bucket`, new Set([...names, 'le']));
  }
}

/** Series Prometheus adds to every scrape target. */
const PROMETHEUS_SERIES = [
  'up',
  'scrape_duration_seconds',
  'scrape_samples_scraped',
  'scrape_samples_post_metric_relabeling',
  'scrape_series_added',
];

/**
 * Series of the Redis exporter (oliver006/redis_exporter, the version pinned in docker-compose.yml and
 * infra/k8s/base/redis.yaml) that the alerts use: not ours to derive, so listed by hand, and only these.
 */
export const REDIS_EXPORTER_SERIES = ['redis_up', 'redis_memory_used_bytes', 'redis_memory_max_bytes'];

function seriesOf(name: string, type: string): string[] {
  if (type === 'histogram') return [`${name}_bucket`, `${name}_sum`, `${name}_count`];
  if (type === 'summary') return [name, `${name}_sum`, `${name}_count`];
  return [name];
}

async function registrySeries(registry: {
  getMetricsAsJSON(): Promise<Array<{ name: string; type: unknown }>>;
}): Promise<string[]> {
  return (await registry.getMetricsAsJSON()).flatMap((metric) => seriesOf(metric.name, String(metric.type)));
}

/** Sample names of a Prometheus text exposition (labels, values and comments dropped). */
export function exposedSeries(text: string): string[] {
  const names = new Set<string>();
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][a-zA-Z0-9_:]*)/.exec(line);
    if (match?.[1]) names.add(match[1]);
  }
  return [...names];
}

async function simSeries(): Promise<string[]> {
  const sim = await createSimServer(SimConfig.parse({ metricsDialect: 'vllm' }), { logger: false });
  try {
    const response = await sim.app.inject({ method: 'GET', url: '/metrics' });
    if (response.statusCode !== 200) throw new Error(`vllm-sim /metrics answered ${response.statusCode}`);
    return exposedSeries(response.body);
  } finally {
    await sim.close();
  }
}

export async function loadMetricCatalog(): Promise<MetricCatalog> {
  const router = new RouterMetrics();
  const poller = new PollerMetrics({ backends: () => 0 });
  const series = new Map<string, MetricSource>();
  for (const name of PROMETHEUS_SERIES) series.set(name, 'prometheus');
  for (const name of REDIS_EXPORTER_SERIES) series.set(name, 'redis');
  for (const name of await registrySeries(router.registry)) series.set(name, 'router');
  for (const name of await registrySeries(poller.registry)) series.set(name, 'poller');
  for (const name of await simSeries()) series.set(name, 'backend');
  const labels = new Map<string, ReadonlySet<string>>();
  registryLabels(router.registry, labels);
  registryLabels(poller.registry, labels);
  return { series, labels };
}

/** What is wrong with one expression: syntax errors and metric names no app defines. */
export function expressionProblems(expression: string, catalog: MetricCatalog): string[] {
  const parsed = parsePromql(expression);
  const problems = [...parsed.errors];
  for (const name of parsed.metricNames) {
    if (catalog.series.has(name)) continue;
    const histogramBase = /^(.*)_(?:bucket|sum|count)$/.exec(name)?.[1];
    const hint = catalog.series.has(`${name}_bucket`)
      ? ' (a histogram: use _bucket, _sum or _count)'
      : histogramBase !== undefined &&
          !catalog.series.has(`${histogramBase}_bucket`) &&
          catalog.series.has(histogramBase)
        ? ` (${histogramBase} is not a histogram)`
        : '';
    problems.push(`unknown metric ${name}${hint}`);
  }
  return problems;
}

/** Problems of many labelled expressions, as `label: problem` lines (empty when all are fine). */
export function checkExpressions(
  expressions: ReadonlyArray<{ readonly where: string; readonly expr: string }>,
  catalog: MetricCatalog,
): string[] {
  return expressions.flatMap(({ where, expr }) =>
    expressionProblems(expr, catalog).map((problem) => `${where}: ${problem}`),
  );
}
