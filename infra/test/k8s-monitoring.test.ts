/**
 * infra/k8s/components/prometheus-operator: the Prometheus Operator's view of kvroute. The
 * PrometheusRule is generated from the compose stack's alert rules and must not drift from them; the
 * monitors select the router Service and the poller pods by labels and port names that exist.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { ALERTS_FILE, PROMETHEUS_RULE_FILE, renderPrometheusRule } from '../../tools/generate-k8s-monitoring';
import { findObject, K8S_DIR } from './k8s-fixtures';
import { buildKustomization, podSpecsOf, type K8sObject } from './k8s-kustomize';
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

  it('scrapes the routers through their Service port and the pollers through their pods, by labels that select them', () => {
    const service = findObject(a100, 'Service', 'kvroute-router');
    const serviceMonitor = findObject(a100, 'ServiceMonitor', 'kvroute-router');
    expect(
      Object.entries(serviceMonitor.spec.selector.matchLabels).every(
        ([key, value]) => service.metadata.labels?.[key] === value,
      ),
    ).toBe(true);
    for (const endpoint of serviceMonitor.spec.endpoints)
      expect(service.spec.ports.map((port: { name: string }) => port.name)).toContain(endpoint.port);

    const poller = findObject(a100, 'Deployment', 'kvroute-poller');
    const podMonitor = findObject(a100, 'PodMonitor', 'kvroute-poller');
    const podLabels = poller.spec.template.metadata.labels as Record<string, string>;
    expect(Object.entries(podMonitor.spec.selector.matchLabels).every(([key, value]) => podLabels[key] === value)).toBe(
      true,
    );
    const portNames = podSpecsOf(poller).flatMap((pod) =>
      pod.containers.flatMap((container: { ports?: Array<{ name: string }> }) =>
        (container.ports ?? []).map((port) => port.name),
      ),
    );
    for (const endpoint of podMonitor.spec.podMetricsEndpoints) expect(portNames).toContain(endpoint.port);
  });

  it('is opt-in: the local overlay (a plain cluster, no operator CRDs) has none of its kinds', () => {
    const operatorKinds = (objects: readonly K8sObject[]) =>
      objects.filter((object) => object.apiVersion.startsWith('monitoring.coreos.com/')).map((object) => object.kind);
    expect(operatorKinds(local)).toEqual([]);
    expect(operatorKinds(a100).sort()).toEqual(['PodMonitor', 'PrometheusRule', 'ServiceMonitor']);
  });
});
