// `npm run k8s:monitoring`: infra/k8s/components/prometheus-operator/prometheus-rule.yaml from
// infra/prometheus/alerts.yml, so Kubernetes (Prometheus Operator) and the compose stack alert on the
// same rules. infra/test/k8s-monitoring.test.ts fails when the file is not what this writes.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parse, stringify } from 'yaml';
import { parseCommandLine } from '../libs/platform/src/command-line/parse-command-line';

const root = join(import.meta.dirname, '..');
export const ALERTS_FILE = 'infra/prometheus/alerts.yml';
export const PROMETHEUS_RULE_FILE = 'infra/k8s/components/prometheus-operator/prometheus-rule.yaml';

/** The PrometheusRule manifest (text) holding the groups of the alert rules file. */
export function renderPrometheusRule(alertsText: string): string {
  const { groups } = parse(alertsText) as { groups: unknown[] };
  const rule = {
    apiVersion: 'monitoring.coreos.com/v1',
    kind: 'PrometheusRule',
    metadata: { name: 'kvroute', labels: { 'app.kubernetes.io/name': 'kvroute' } },
    spec: { groups },
  };
  return `# Generated from ${ALERTS_FILE} by \`npm run k8s:monitoring\`: edit the rules there, then regenerate.\n${stringify(rule, { lineWidth: 0 })}`;
}

if (process.argv[1] && import.meta.filename === process.argv[1]) {
  parseCommandLine({
    usage: 'npm run k8s:monitoring',
    summary: `Writes ${PROMETHEUS_RULE_FILE}\nfrom ${ALERTS_FILE} (the Prometheus Operator's copy of the alert rules).`,
    options: {},
  });
  writeFileSync(join(root, PROMETHEUS_RULE_FILE), renderPrometheusRule(readFileSync(join(root, ALERTS_FILE), 'utf8')));
  process.stdout.write(`${PROMETHEUS_RULE_FILE}\n`);
}
