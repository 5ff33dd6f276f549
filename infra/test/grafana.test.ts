import { existsSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { checkExpressions, loadMetricCatalog, TARGET_LABELS, type MetricCatalog } from './metric-catalog';
import { parsePromql } from './promql';
import {
  allPanels,
  bindMounts,
  dashboardExpressions,
  readCompose,
  readRepoFile,
  readYaml,
  repoPath,
  serviceEnv,
  type ComposeService,
  type GrafanaDashboard,
} from './stack-files';

const datasources = readYaml<{ datasources: Array<{ uid: string; type: string; url: string; isDefault?: boolean }> }>(
  'infra/grafana/provisioning/datasources/prometheus.yml',
);
const providers = readYaml<{ providers: Array<{ type: string; options: { path: string } }> }>(
  'infra/grafana/provisioning/dashboards/kvroute.yml',
);
const dashboard = JSON.parse(readRepoFile('infra/grafana/dashboards/kvroute.json')) as GrafanaDashboard;
const compose = readCompose();
const grafana = compose.services['grafana'] as ComposeService;
const panels = allPanels(dashboard).filter((panel) => panel.type !== 'row');
interface DashboardVariable {
  readonly type: string;
  readonly name: string;
  readonly query?: string | { readonly query?: string };
  readonly datasource?: { readonly uid?: string };
}
const variables = (dashboard as unknown as { templating: { list: DashboardVariable[] } }).templating.list;

let catalog: MetricCatalog;
beforeAll(async () => {
  catalog = await loadMetricCatalog();
});

describe('Grafana provisioning', () => {
  it('provisions the compose Prometheus as the default datasource', () => {
    expect(datasources.datasources).toHaveLength(1);
    const [datasource] = datasources.datasources;
    expect(datasource?.type).toBe('prometheus');
    expect(datasource?.url).toBe('http://prometheus:9090');
    expect(datasource?.isDefault).toBe(true);
    expect(compose.services['prometheus']).toBeDefined();
  });

  it('loads dashboards from the folder compose mounts, and the home dashboard is there', () => {
    const [provider] = providers.providers;
    expect(provider?.type).toBe('file');
    const mount = bindMounts(grafana).find((volume) => volume.target === provider?.options.path);
    expect(mount?.source).toBe('infra/grafana/dashboards');
    const home = serviceEnv(grafana)['GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH'] ?? '';
    expect(home.startsWith(`${provider?.options.path}/`)).toBe(true);
    expect(existsSync(repoPath(mount?.source ?? '', home.slice((provider?.options.path.length ?? 0) + 1)))).toBe(true);
  });
});

describe('infra/grafana/dashboards/kvroute.json', () => {
  it('queries only metric names the apps define, in PromQL that parses', () => {
    expect(checkExpressions(dashboardExpressions(dashboard), catalog)).toEqual([]);
  });

  it('queries the datasource variable in every panel, target and query variable; it picks a Prometheus (the provisioned default)', () => {
    const datasource = variables.find((variable) => variable.type === 'datasource');
    expect(datasource).toMatchObject({ name: 'datasource', query: 'prometheus' });
    expect(datasources.datasources.filter((entry) => entry.isDefault).map((entry) => entry.type)).toEqual([
      'prometheus',
    ]);
    for (const panel of panels) {
      expect(panel.datasource?.uid, panel.title).toBe('${datasource}');
      expect(panel.targets?.length, panel.title).toBeGreaterThan(0);
      for (const target of panel.targets ?? [])
        expect(target.datasource?.uid, `${panel.title} ${target.refId}`).toBe('${datasource}');
    }
    for (const variable of variables.filter((entry) => entry.type === 'query'))
      expect(variable.datasource?.uid, variable.name).toBe('${datasource}');
  });

  it('has job, model and backend variables, each a label_values query that resolves: a real metric carrying that label', () => {
    expect(variables.map((variable) => variable.name)).toEqual(['datasource', 'job', 'model', 'backend']);
    const defined: string[] = [];
    for (const variable of variables) {
      if (variable.type === 'query') {
        const query = typeof variable.query === 'string' ? variable.query : (variable.query?.query ?? '');
        const match = /^label_values\((.+),\s*(\w+)\)$/.exec(query);
        expect(match, `${variable.name}: ${query}`).not.toBeNull();
        const [, selector, label] = match as unknown as [string, string, string];
        expect(checkExpressions([{ where: variable.name, expr: selector }], catalog)).toEqual([]);
        const [metric] = parsePromql(selector).metricNames;
        const carries = TARGET_LABELS.has(label) || (catalog.labels.get(metric as string)?.has(label) ?? false);
        expect(carries, `${variable.name}: ${metric} has no label ${label}`).toBe(true);
        // Chained variables refer only to the ones before them.
        for (const used of query.matchAll(/\$(\w+)/g))
          expect(defined, `${variable.name} uses $${used[1]}`).toContain(used[1]);
      }
      defined.push(variable.name);
    }
  });

  it('filters by the variables only on series that carry those labels, and uses no undefined variable', () => {
    const names = new Set(variables.map((variable) => variable.name));
    for (const { where, expr } of dashboardExpressions(dashboard)) {
      for (const used of expr.matchAll(/\$(\w+)/g)) {
        const name = used[1] as string;
        if (!name.startsWith('__')) expect(names.has(name), `${where} uses $${name}`).toBe(true);
      }
      // Every `label=~"$variable"` matcher sits on a metric that has that label (else the panel is empty).
      for (const selector of expr.matchAll(/([a-zA-Z_:][\w:]*)\{([^}]*)\}/g)) {
        const [, metric, matchers] = selector as unknown as [string, string, string];
        for (const matcher of matchers.matchAll(/(\w+)=~"\$\w+"/g)) {
          const label = matcher[1] as string;
          const carries = TARGET_LABELS.has(label) || (catalog.labels.get(metric)?.has(label) ?? false);
          expect(carries, `${where}: ${metric} has no label ${label}`).toBe(true);
        }
      }
    }
  });

  it('has unique panel ids and a grid without overlaps', () => {
    const all = allPanels(dashboard);
    expect(new Set(all.map((panel) => panel.id)).size).toBe(all.length);
    const cells = new Set<string>();
    for (const panel of all) {
      const { x, y, w, h } = panel.gridPos;
      expect(x + w, panel.title).toBeLessThanOrEqual(24);
      for (let row = y; row < y + h; row += 1) {
        for (let column = x; column < x + w; column += 1) {
          const cell = `${row}:${column}`;
          expect(cells.has(cell), `${panel.title} overlaps at ${cell}`).toBe(false);
          cells.add(cell);
        }
      }
    }
  });

  it('shows request rate by backend and reason, TTFT quantiles, KV hit rate, in-flight, KV usage, degraded and breaker state', () => {
    const queries = dashboardExpressions(dashboard).map((entry) => entry.expr);
    const selecting = (metric: string) => queries.filter((expr) => parsePromql(expr).metricNames.includes(metric));
    expect(selecting('kvroute_router_requests_total').some((expr) => /by \(backend, reason\)/.test(expr))).toBe(true);
    const ttft = selecting('kvroute_router_time_to_first_token_seconds_bucket');
    for (const quantile of ['0.5', '0.95', '0.99'])
      expect(
        ttft.some((expr) => expr.startsWith(`histogram_quantile(${quantile},`)),
        quantile,
      ).toBe(true);
    // KV panels read what every engine dialect yields: the responses' usage and the poller's normalised gauges.
    expect(
      queries.some((expr) =>
        /kvroute_router_tokens_total\{[^}]*kind="cached"[^}]*\}.*\/.*kvroute_router_tokens_total\{[^}]*kind="prompt"/s.test(
          expr,
        ),
      ),
    ).toBe(true);
    expect(queries.filter((expr) => parsePromql(expr).metricNames.some((name) => name.startsWith('vllm:')))).toEqual(
      [],
    );
    for (const metric of [
      'kvroute_router_inflight_requests',
      'kvroute_poller_backend_kv_cache_usage_ratio',
      'kvroute_poller_backend_requests_waiting',
      'kvroute_router_state_degraded',
      'kvroute_router_backend_circuit_state',
    ]) {
      expect(selecting(metric), metric).not.toEqual([]);
    }
  });
});
