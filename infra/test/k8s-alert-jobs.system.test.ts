/**
 * Every overlay, as `kubectl kustomize` renders it (system test: needs kubectl with kustomize 5), against
 * the job labels the Prometheus Operator gives the targets of its monitors (operator-jobs.ts): each
 * alert's `job` matcher must select targets of that render, or the alert can never fire. An overlay
 * without the prometheus-operator component is rendered again with it, as a cluster with the Operator
 * would add it.
 */
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { K8S_DIR, kubectlKustomize, writeKustomization } from './k8s-fixtures';
import type { K8sObject } from './k8s-kustomize';
import { operatorTargets, ruleJobMatchers, unmatchedRuleJobs } from './operator-jobs';

const OVERLAYS = readdirSync(join(K8S_DIR, 'overlays'), { withFileTypes: true })
  .filter((entry) => entry.isDirectory())
  .map((entry) => entry.name)
  .sort();

/** The overlay as rendered, with the prometheus-operator component added when it has no PrometheusRule. */
function renderWithOperator(overlay: string): { objects: K8sObject[]; how: string } {
  const objects = kubectlKustomize(join(K8S_DIR, 'overlays', overlay));
  if (objects.some((object) => object.kind === 'PrometheusRule')) return { objects, how: 'as shipped' };
  const fixture = writeKustomization({
    'kustomization.yaml': `namespace: kvroute\nresources:\n  - {{k8s}}/overlays/${overlay}\ncomponents:\n  - {{k8s}}/components/prometheus-operator\n`,
  });
  try {
    return { objects: kubectlKustomize(fixture.dir), how: 'with components/prometheus-operator added' };
  } finally {
    fixture.remove();
  }
}

describe('alert rules select the job labels the Prometheus Operator produces', () => {
  it('finds the overlays', () => {
    expect(OVERLAYS).toEqual(expect.arrayContaining(['a100', 'local']));
  });

  describe.each(OVERLAYS)('overlays/%s', (overlay) => {
    const { objects, how } = renderWithOperator(overlay);

    it(`every alert's job matcher selects some target (${how})`, () => {
      expect(ruleJobMatchers(objects).length).toBeGreaterThan(0);
      expect(unmatchedRuleJobs(objects)).toEqual([]);
    });

    it('every monitor selects pods on a port they name', () => {
      expect(operatorTargets(objects).problems).toEqual([]);
    });

    it('routers, pollers and every backend are scraped', () => {
      const scraped = new Set(operatorTargets(objects).targets.map((target) => target.workload));
      const components = ['router', 'poller', 'backend'];
      const workloads = objects.filter((object) =>
        components.includes(object['spec']?.template?.metadata?.labels?.['app.kubernetes.io/component']),
      );
      for (const component of components)
        expect(
          workloads.some(
            (object) => object['spec'].template.metadata.labels['app.kubernetes.io/component'] === component,
          ),
          `a ${component} workload`,
        ).toBe(true);
      const unscraped = workloads
        .map((object) => `${object.kind}/${object.metadata.name}`)
        .filter((workload) => !scraped.has(workload));
      expect(unscraped).toEqual([]);
    });
  });
});
