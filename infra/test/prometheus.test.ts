import { beforeAll, describe, expect, it } from 'vitest';
import { checkExpressions, loadMetricCatalog, type MetricCatalog } from './metric-catalog';
import { parsePromql } from './promql';
import {
  aliasesOf,
  alertExpressions,
  flagValue,
  readCompose,
  readYaml,
  serviceEnv,
  servicesOf,
  type ComposeService,
  type PrometheusConfig,
  ROUTER_OPS_PORT_DEFAULT,
  type RuleFile,
} from './stack-files';

const config = readYaml<PrometheusConfig>('infra/prometheus/prometheus.yml');
const rules = readYaml<RuleFile>('infra/prometheus/alerts.yml');
const compose = readCompose();
const jobs = new Map(
  config.scrape_configs.map((job) => [job.job_name, job.static_configs?.flatMap((group) => group.targets) ?? []]),
);
const alerts = rules.groups.flatMap((group) => group.rules);

let catalog: MetricCatalog;
beforeAll(async () => {
  catalog = await loadMetricCatalog();
});

describe('infra/prometheus/prometheus.yml', () => {
  it('scrapes every router, poller and backend of docker-compose.yml on its port', () => {
    // The routers' ops listener: their API port (KVROUTE_PORT) no longer serves /metrics.
    const routers = servicesOf(compose, 'router')
      .filter(([, service]) => !service.profiles?.includes('pd'))
      .map(([name, service]) => `${name}:${serviceEnv(service)['KVROUTE_OPS_PORT'] ?? ROUTER_OPS_PORT_DEFAULT}`);
    for (const [name, service] of servicesOf(compose, 'router').filter(
      ([, service]) => !service.profiles?.includes('pd'),
    ))
      expect(serviceEnv(service)['KVROUTE_PORT'], name).not.toBe(String(ROUTER_OPS_PORT_DEFAULT));
    const pollers = servicesOf(compose, 'poller').map(
      ([name, service]) => `${name}:${serviceEnv(service)['KVROUTE_POLLER_PORT']}`,
    );
    const backends = servicesOf(compose, 'sim')
      .filter(([, service]) => !service.profiles?.includes('pd'))
      .map(([, service]) => `${aliasesOf(service)[0]}:${serviceEnv(service)['KVROUTE_SIM_PORT']}`);
    expect(jobs.get('kvroute-router')).toEqual(routers);
    expect(jobs.get('kvroute-poller')).toEqual(pollers);
    expect(jobs.get('backends')).toEqual(backends);
    expect(jobs.get('redis')).toEqual(['redis-exporter:9121']);
    expect(compose.services['redis-exporter']?.environment?.['REDIS_ADDR']).toBe('redis://redis:6379');
    // The vLLM services of the gpu profile answer on the same aliases and port.
    const vllmTargets = ['vllm-1', 'vllm-2', 'vllm-3', 'vllm-4'].map((name) => {
      const service = compose.services[name] as ComposeService;
      return `${aliasesOf(service)[0]}:${flagValue(service.command ?? [], '--port')}`;
    });
    expect(vllmTargets).toEqual(backends);
  });

  it('loads alerts.yml, which sits beside it in the mounted folder', () => {
    // That the file is there needs no assertion: `rules` above is read from it when this file loads.
    expect(config.rule_files).toEqual(['alerts.yml']);
  });
});

describe('infra/prometheus/alerts.yml', () => {
  it('uses only metric names the apps define, in PromQL that parses', () => {
    expect(checkExpressions(alertExpressions(rules), catalog)).toEqual([]);
  });

  it('names only scrape jobs that exist', () => {
    const jobMatchers = alerts.flatMap((rule) =>
      parsePromql(rule.expr).matchers.filter((matcher) => matcher.label === 'job'),
    );
    expect(jobMatchers.length).toBeGreaterThan(0);
    for (const matcher of jobMatchers) expect([...jobs.keys()], matcher.value).toContain(matcher.value);
  });

  it('gives every alert a unique name, a severity and a summary', () => {
    const names = alerts.map((rule) => rule.alert);
    expect(new Set(names).size).toBe(names.length);
    for (const rule of alerts) {
      expect(rule.alert, rule.expr).toMatch(/^Kvroute[A-Z]\w+$/);
      expect(['warning', 'critical'], rule.alert).toContain(rule.labels?.['severity']);
      expect(rule.annotations?.['summary'], rule.alert).toBeTruthy();
    }
  });

  it('covers degraded state, backends down or broken, hot-spotting, TTFT and poller failures', () => {
    const using = (metric: string) =>
      alerts.filter((rule) => parsePromql(rule.expr).metricNames.includes(metric)).map((rule) => rule.alert);
    expect(using('kvroute_router_state_degraded')).not.toEqual([]);
    expect(using('kvroute_router_backend_circuit_state')).not.toEqual([]);
    expect(
      alerts.some((rule) =>
        parsePromql(rule.expr).matchers.some((matcher) => matcher.metric === 'up' && matcher.value === 'backends'),
      ),
    ).toBe(true);
    expect(using('kvroute_router_inflight_requests')).toContain('KvrouteHotSpot');
    expect(using('kvroute_router_time_to_first_token_seconds_bucket')).not.toEqual([]);
    expect(using('kvroute_poller_scrape_failures_total')).not.toEqual([]);
  });

  it('has unit tests whose input series are real metric names', () => {
    const tests = readYaml<{
      rule_files: string[];
      tests: Array<{ input_series: Array<{ series: string }>; alert_rule_test: Array<{ alertname: string }> }>;
    }>('infra/prometheus/alerts.test.yml');
    expect(tests.rule_files).toEqual(['alerts.yml']);
    const series = tests.tests.flatMap((test) =>
      test.input_series.map((input, index) => ({ where: `alerts.test.yml series ${index}`, expr: input.series })),
    );
    expect(checkExpressions(series, catalog)).toEqual([]);
    const tested = new Set(tests.tests.flatMap((test) => test.alert_rule_test.map((entry) => entry.alertname)));
    for (const name of [
      'KvrouteHotSpot',
      'KvrouteSharedStateDegraded',
      'KvrouteBackendCircuitOpen',
      'KvroutePollerScrapeFailures',
      'KvrouteTtftP95High',
    ]) {
      expect(tested, name).toContain(name);
    }
  });
});
