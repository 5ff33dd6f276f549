/**
 * infra/k8s/components/prometheus-operator: the Prometheus Operator's view of kvroute. The
 * PrometheusRule is generated from the compose stack's alert rules and must not drift from them; the
 * monitors select the routers', pollers', backends' and Redis's pods by labels and port names that exist,
 * and give their targets the jobs the rules name (operator-jobs.ts models how the Operator names jobs;
 * k8s-alert-jobs.system.test.ts runs the same check over every overlay as kubectl renders it).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { ALERTS_FILE, PROMETHEUS_RULE_FILE, renderPrometheusRule } from '../../tools/generate-k8s-monitoring';
import { findObject, K8S_DIR } from './k8s-fixtures';
import { buildKustomization, type K8sObject } from './k8s-kustomize';
import { matcherSelects, operatorTargets, unmatchedRuleJobs } from './operator-jobs';
import { repoPath } from './stack-files';

const a100 = buildKustomization(join(K8S_DIR, 'overlays/a100'));
const local = buildKustomization(join(K8S_DIR, 'overlays/local'));

describe('the prometheus-operator component', () => {
  it('holds the PrometheusRule `npm run k8s:monitoring` writes: the compose alert rules, group for group', () => {
    const alerts = readFileSync(repoPath(ALERTS_FILE), 'utf8');
    expect(readFileSync(repoPath(PROMETHEUS_RULE_FILE), 'utf8')).toBe(renderPrometheusRule(alerts));
    const rule = findObject(a100, 'PrometheusRule', 'kvroute');
    expect(rule.spec.groups).toEqual((parseYaml(alerts) as { groups: unknown[] }).groups);
    expect(rule.metadata.namespace).toBe('kvroute');
  });

  it("scrapes routers (ops port), pollers, backends and Redis's exporter pod by pod, each with the job its rules use", () => {
    const { targets, problems } = operatorTargets(a100);
    expect(problems).toEqual([]);
    expect(
      [
        ...new Set(targets.map((target) => `${target.monitor} ${target.workload}:${target.port} job=${target.job}`)),
      ].sort(),
    ).toEqual([
      'PodMonitor/kvroute-backends StatefulSet/vllm:http job=backends',
      'PodMonitor/kvroute-poller Deployment/kvroute-poller:http job=kvroute-poller',
      'PodMonitor/kvroute-router Deployment/kvroute-router:ops job=kvroute-router',
      'PodMonitor/redis Deployment/redis:metrics job=redis',
    ]);
    expect(unmatchedRuleJobs(a100)).toEqual([]);
  });

  it('is opt-in: the local overlay (a plain cluster, no operator CRDs) has none of its kinds', () => {
    const operatorKinds = (objects: readonly K8sObject[]) =>
      objects.filter((object) => object.apiVersion.startsWith('monitoring.coreos.com/')).map((object) => object.kind);
    expect(operatorKinds(local)).toEqual([]);
    expect(operatorKinds(a100).sort()).toEqual([
      'PodMonitor',
      'PodMonitor',
      'PodMonitor',
      'PodMonitor',
      'PrometheusRule',
    ]);
  });
});

describe('the model of the job labels the Operator gives (operator-jobs.ts)', () => {
  const pod = (name: string, labels: Record<string, string>, port = 'metrics'): K8sObject => ({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { name, namespace: 'shop' },
    spec: { template: { metadata: { labels }, spec: { containers: [{ name: 'main', ports: [{ name: port }] }] } } },
  });
  const podMonitor = (spec: Record<string, unknown>): K8sObject => ({
    apiVersion: 'monitoring.coreos.com/v1',
    kind: 'PodMonitor',
    metadata: { name: 'cart', namespace: 'shop' },
    spec: { selector: { matchLabels: { app: 'cart' } }, podMetricsEndpoints: [{ port: 'metrics' }], ...spec },
  });
  const jobsOf = (objects: K8sObject[]): string[] => operatorTargets(objects).targets.map((target) => target.job);

  it('a PodMonitor without jobLabel: job="<namespace>/<monitor>" (the finding of issue 31)', () => {
    expect(jobsOf([pod('cart', { app: 'cart', tier: 'web' }), podMonitor({})])).toEqual(['shop/cart']);
  });

  it('jobLabel takes the pod label, and falls back to namespace/name where the pod lacks it or it is empty', () => {
    expect(jobsOf([pod('cart', { app: 'cart', tier: 'web' }), podMonitor({ jobLabel: 'tier' })])).toEqual(['web']);
    expect(jobsOf([pod('cart', { app: 'cart' }), podMonitor({ jobLabel: 'tier' })])).toEqual(['shop/cart']);
    expect(jobsOf([pod('cart', { app: 'cart', tier: '' }), podMonitor({ jobLabel: 'tier' })])).toEqual(['shop/cart']);
  });

  it('an endpoint relabeling of job comes after jobLabel', () => {
    const relabelled = podMonitor({
      jobLabel: 'tier',
      podMetricsEndpoints: [{ port: 'metrics', relabelings: [{ targetLabel: 'job', replacement: 'cart-api' }] }],
    });
    expect(jobsOf([pod('cart', { app: 'cart', tier: 'web' }), relabelled])).toEqual(['cart-api']);
    const fromLabel = podMonitor({
      podMetricsEndpoints: [
        {
          port: 'metrics',
          relabelings: [
            {
              sourceLabels: ['__meta_kubernetes_pod_label_tier'],
              regex: '(w.*)',
              replacement: 'tier-$1',
              targetLabel: 'job',
            },
          ],
        },
      ],
    });
    expect(jobsOf([pod('cart', { app: 'cart', tier: 'web' }), fromLabel])).toEqual(['tier-web']);
  });

  it('a ServiceMonitor: the Service name, or its jobLabel; only Services with the port and pods behind them', () => {
    const service: K8sObject = {
      apiVersion: 'v1',
      kind: 'Service',
      metadata: { name: 'cart-svc', namespace: 'shop', labels: { app: 'cart', team: 'checkout' } },
      spec: { selector: { app: 'cart' }, ports: [{ name: 'metrics', port: 9000 }] },
    };
    const serviceMonitor = (spec: Record<string, unknown>): K8sObject => ({
      apiVersion: 'monitoring.coreos.com/v1',
      kind: 'ServiceMonitor',
      metadata: { name: 'cart', namespace: 'shop' },
      spec: { selector: { matchLabels: { app: 'cart' } }, endpoints: [{ port: 'metrics' }], ...spec },
    });
    expect(jobsOf([pod('cart', { app: 'cart' }), service, serviceMonitor({})])).toEqual(['cart-svc']);
    expect(jobsOf([pod('cart', { app: 'cart' }), service, serviceMonitor({ jobLabel: 'team' })])).toEqual(['checkout']);
    expect(
      operatorTargets([pod('cart', { app: 'cart' }), service, serviceMonitor({ endpoints: [{ port: 'web' }] })])
        .problems,
    ).toEqual(['ServiceMonitor/cart → Service/cart-svc: the Service has no port named web']);
  });

  it('reports monitors that select nothing or name a port the pods lack, and relabelings it cannot follow', () => {
    expect(operatorTargets([pod('cart', { app: 'other' }), podMonitor({})]).problems).toEqual([
      'PodMonitor/cart selects no pods',
    ]);
    expect(operatorTargets([pod('cart', { app: 'cart' }, 'http'), podMonitor({})]).problems).toEqual([
      'PodMonitor/cart → Deployment/cart: the pods have no container port named metrics',
    ]);
    const hashing = podMonitor({
      podMetricsEndpoints: [{ port: 'metrics', relabelings: [{ action: 'hashmod', targetLabel: 'job', modulus: 2 }] }],
    });
    expect(operatorTargets([pod('cart', { app: 'cart' }), hashing]).problems).toEqual([
      'PodMonitor/cart → Deployment/cart: a hashmod relabeling of job',
    ]);
  });

  it("matches rules' job matchers as PromQL does (anchored regexes), and names the alerts that match no job", () => {
    const matcher = (op: string, value: string) => ({ alert: 'A', op, value });
    expect(matcherSelects(matcher('=', 'shop/cart'), 'shop/cart')).toBe(true);
    expect(matcherSelects(matcher('=', 'cart'), 'shop/cart')).toBe(false);
    expect(matcherSelects(matcher('=~', 'cart|shop/.*'), 'shop/cart')).toBe(true);
    expect(matcherSelects(matcher('=~', 'cart'), 'shop/cart')).toBe(false);
    const rule: K8sObject = {
      apiVersion: 'monitoring.coreos.com/v1',
      kind: 'PrometheusRule',
      metadata: { name: 'cart', namespace: 'shop' },
      spec: { groups: [{ name: 'g', rules: [{ alert: 'CartDown', expr: 'up{job="cart"} == 0' }] }] },
    };
    expect(unmatchedRuleJobs([pod('cart', { app: 'cart' }), podMonitor({}), rule])).toEqual([
      'CartDown: job="cart", but the monitors produce shop/cart',
    ]);
    expect(
      unmatchedRuleJobs([pod('cart', { app: 'cart', tier: 'cart' }), podMonitor({ jobLabel: 'tier' }), rule]),
    ).toEqual([]);
  });
});
