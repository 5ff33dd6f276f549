import { existsSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { checkExpressions, loadMetricCatalog, type MetricCatalog } from './metric-catalog';
import { parsePromql } from './promql';
import { allPanels, bindMounts, dashboardExpressions, readCompose, readRepoFile, readYaml, repoPath, serviceEnv, type ComposeService, type GrafanaDashboard } from './stack-files';

const datasources = readYaml<{ datasources: Array<{ uid: string; type: string; url: string; isDefault?: boolean }> }>('infra/grafana/provisioning/datasources/prometheus.yml');
const providers = readYaml<{ providers: Array<{ type: string; options: { path: string } }> }>('infra/grafana/provisioning/dashboards/kvroute.yml');
const dashboard = JSON.parse(readRepoFile('infra/grafana/dashboards/kvroute.json')) as GrafanaDashboard;
const compose = readCompose();
const grafana = compose.services['grafana'] as ComposeService;
const panels = allPanels(dashboard).filter((panel) => panel.type !== 'row');

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

  it('queries the provisioned datasource in every panel and target', () => {
    const uid = datasources.datasources[0]?.uid;
    for (const panel of panels) {
      expect(panel.datasource?.uid, panel.title).toBe(uid);
      expect(panel.targets?.length, panel.title).toBeGreaterThan(0);
      for (const target of panel.targets ?? []) expect(target.datasource?.uid, `${panel.title} ${target.refId}`).toBe(uid);
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
    for (const quantile of ['0.5', '0.95', '0.99']) expect(ttft.some((expr) => expr.startsWith(`histogram_quantile(${quantile},`)), quantile).toBe(true);
    expect(queries.some((expr) => /vllm:prefix_cache_hits_total.*\/.*vllm:prefix_cache_queries_total/s.test(expr))).toBe(true);
    for (const metric of ['kvroute_router_inflight_requests', 'vllm:kv_cache_usage_perc', 'kvroute_router_state_degraded', 'kvroute_router_backend_circuit_state']) {
      expect(selecting(metric), metric).not.toEqual([]);
    }
  });
});
