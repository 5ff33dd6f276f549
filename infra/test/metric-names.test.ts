import { beforeAll, describe, expect, it } from 'vitest';
import {
  checkExpressions,
  expressionProblems,
  exposedSeries,
  loadMetricCatalog,
  type MetricCatalog,
} from './metric-catalog';
import { parsePromql } from './promql';
import {
  alertExpressions,
  dashboardExpressions,
  readRepoFile,
  readYaml,
  type GrafanaDashboard,
  type RuleFile,
} from './stack-files';

let catalog: MetricCatalog;
beforeAll(async () => {
  catalog = await loadMetricCatalog();
});

describe('metric catalog: the names the apps define', () => {
  it('holds the router, poller and vLLM series the stack relies on', () => {
    const expected: Array<[string, string]> = [
      ['kvroute_router_requests_total', 'router'],
      ['kvroute_router_time_to_first_token_seconds_bucket', 'router'],
      ['kvroute_router_inflight_requests', 'router'],
      ['kvroute_router_state_degraded', 'router'],
      ['kvroute_router_nodejs_eventloop_lag_p99_seconds', 'router'],
      ['kvroute_poller_scrape_failures_total', 'poller'],
      ['kvroute_poller_job_lag_seconds_count', 'poller'],
      ['vllm:prefix_cache_hits_total', 'backend'],
      ['vllm:prefix_cache_queries_total', 'backend'],
      ['vllm:kv_cache_usage_perc', 'backend'],
      ['vllm:time_to_first_token_seconds_bucket', 'backend'],
      ['up', 'prometheus'],
    ];
    for (const [name, source] of expected) expect(catalog.series.get(name), name).toBe(source);
  });

  it('stores histograms as _bucket/_sum/_count series, not under their bare name', () => {
    expect(catalog.series.has('kvroute_router_time_to_first_token_seconds')).toBe(false);
    expect(catalog.series.has('kvroute_router_time_to_first_token_seconds_sum')).toBe(true);
  });

  it('reads sample names from an exposition, ignoring comments and labels', () => {
    expect(exposedSeries('# HELP a x\n# TYPE a counter\na_total{x="1"} 3\nvllm:b 1\n\n')).toEqual([
      'a_total',
      'vllm:b',
    ]);
  });
});

describe('PromQL reading', () => {
  it('finds the selected metric names, not functions, label names, label values or grouping labels', () => {
    const parsed = parsePromql(
      'sum by (le, backend) (rate(kvroute_router_time_to_first_token_seconds_bucket{backend=~"up|down"}[$__rate_interval])) ' +
        '/ on () group_left () count(vllm:num_requests_running offset 5m) and label_replace(up{job="backends"}, ' +
        '"x", "$1", "instance", "(.*)")',
    );
    expect(parsed.errors).toEqual([]);
    expect(parsed.metricNames).toEqual([
      'kvroute_router_time_to_first_token_seconds_bucket',
      'vllm:num_requests_running',
      'up',
    ]);
    expect(parsed.matchers).toContainEqual({ metric: 'up', label: 'job', op: '=', value: 'backends' });
  });

  it('reads names given as __name__ matchers', () => {
    expect(parsePromql('{__name__="kvroute_router_state_degraded", instance="a"}').metricNames).toEqual([
      'kvroute_router_state_degraded',
    ]);
  });

  it('reports syntax errors and unknown template variables', () => {
    expect(parsePromql('sum(rate(x[5m])').errors).not.toEqual([]);
    expect(parsePromql('rate(x[$window])').errors).not.toEqual([]);
  });
});

describe('metric-name check', () => {
  it('accepts known series', () => {
    expect(
      expressionProblems(
        'sum(rate(vllm:prefix_cache_hits_total[5m])) / sum(rate(vllm:prefix_cache_queries_total[5m]))',
        catalog,
      ),
    ).toEqual([]);
  });

  it('rejects a deliberately wrong name', () => {
    expect(expressionProblems('sum by (backend) (rate(kvroute_router_request_total[5m]))', catalog)).toEqual([
      'unknown metric kvroute_router_request_total',
    ]);
    expect(expressionProblems('vllm:gpu_cache_usage_perc > 0.9', catalog)).toEqual([
      'unknown metric vllm:gpu_cache_usage_perc',
    ]);
  });

  it('rejects a histogram without its suffix, and a suffix on a metric that is not a histogram', () => {
    expect(expressionProblems('kvroute_router_decision_duration_seconds', catalog)).toEqual([
      'unknown metric kvroute_router_decision_duration_seconds (a histogram: use _bucket, _sum or _count)',
    ]);
    expect(expressionProblems('rate(kvroute_router_state_degraded_count[5m])', catalog)).toEqual([
      'unknown metric kvroute_router_state_degraded_count (kvroute_router_state_degraded is not a histogram)',
    ]);
  });

  it('fails the real dashboard and alert files once one of their names is wrong', () => {
    const dashboard = JSON.parse(readRepoFile('infra/grafana/dashboards/kvroute.json')) as GrafanaDashboard;
    const rules = readYaml<RuleFile>('infra/prometheus/alerts.yml');
    const broken = (list: Array<{ where: string; expr: string }>) =>
      list.map((entry, index) =>
        index === 0
          ? { ...entry, expr: entry.expr.replace(/kvroute_router_\w+|vllm:\w+/, 'kvroute_router_no_such_metric') }
          : entry,
      );
    expect(checkExpressions(dashboardExpressions(dashboard), catalog)).toEqual([]);
    expect(checkExpressions(broken(dashboardExpressions(dashboard)), catalog)).toEqual([
      expect.stringContaining('unknown metric kvroute_router_no_such_metric'),
    ]);
    expect(checkExpressions(alertExpressions(rules), catalog)).toEqual([]);
    expect(checkExpressions(broken(alertExpressions(rules)), catalog)).toEqual([
      expect.stringContaining('unknown metric kvroute_router_no_such_metric'),
    ]);
  });
});
