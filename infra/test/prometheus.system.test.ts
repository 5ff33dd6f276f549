import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { PROMETHEUS_RULE_FILE } from '../../tools/generate-k8s-monitoring';
import { markdownAnchors, readYaml, repoPath, type RuleFile } from './stack-files';

/** Where runbook_url annotations point: the repository's docs on GitHub, file and heading anchor. */
const RUNBOOK_BASE = 'https://github.com/kvroute/kvroute/blob/main/';

/**
 * infra/prometheus as Prometheus itself reads it (system test: needs `promtool`, from Debian's
 * prometheus package, which `npm run test:system` installs).
 */
function promtool(...args: string[]): { status: number | null; output: string } {
  const result = spawnSync('promtool', args, { cwd: repoPath('infra/prometheus'), encoding: 'utf8', timeout: 60_000 });
  expect(
    result.error,
    'promtool is not installed (npm run test:system installs the prometheus package)',
  ).toBeUndefined();
  return { status: result.status, output: `${result.stdout}\n${result.stderr}` };
}

describe('promtool', () => {
  it('accepts prometheus.yml (and the rule file it loads)', () => {
    const result = promtool('check', 'config', 'prometheus.yml');
    expect(result.status, result.output).toBe(0);
  });

  it('accepts alerts.yml', () => {
    const result = promtool('check', 'rules', 'alerts.yml');
    expect(result.status, result.output).toBe(0);
  });

  it('passes the alert unit tests (alerts.test.yml): each alert fires when it should and only then', () => {
    const result = promtool('test', 'rules', 'alerts.test.yml');
    expect(result.status, result.output).toBe(0);
    expect(result.output).toMatch(/SUCCESS/);
  }, 60_000);

  it('accepts the PrometheusRule the Prometheus Operator loads (its groups, as a rule file)', () => {
    const rule = readYaml<{ spec: RuleFile }>(PROMETHEUS_RULE_FILE);
    const dir = mkdtempSync(join(tmpdir(), 'kvroute-prometheus-rule-'));
    try {
      writeFileSync(join(dir, 'rules.yml'), stringify(rule.spec));
      const result = promtool('check', 'rules', join(dir, 'rules.yml'));
      expect(result.status, result.output).toBe(0);
      expect(result.output).toMatch(/SUCCESS: \d+ rules found/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('runbooks', () => {
  const alerts = readYaml<RuleFile>('infra/prometheus/alerts.yml').groups.flatMap((group) => group.rules);

  it('every alert has a runbook_url on a heading of the docs that exists', () => {
    expect(alerts.length).toBeGreaterThan(0);
    const problems = alerts.flatMap((rule) => {
      const url = rule.annotations?.['runbook_url'];
      if (url === undefined) return [`${rule.alert}: no runbook_url`];
      if (!url.startsWith(RUNBOOK_BASE)) return [`${rule.alert}: ${url} is not under ${RUNBOOK_BASE}`];
      const [file, anchor] = url.slice(RUNBOOK_BASE.length).split('#') as [string, string | undefined];
      if (!/^docs\/[\w./-]+\.md$/.test(file)) return [`${rule.alert}: ${url} is not a Markdown file of docs/`];
      if (anchor === undefined || anchor === '') return [`${rule.alert}: ${url} has no anchor`];
      let anchors: Set<string>;
      try {
        anchors = markdownAnchors(file);
      } catch {
        return [`${rule.alert}: ${file} does not exist`];
      }
      return anchors.has(anchor) ? [] : [`${rule.alert}: ${file} has no heading #${anchor}`];
    });
    expect(problems).toEqual([]);
  });

  it('the anchors are read as GitHub makes them', () => {
    // A check of the check: headings in code fences do not count, punctuation goes, spaces become hyphens.
    expect(markdownAnchors('docs/operations.md')).toContain('redis-down-or-slow');
    expect(markdownAnchors('docs/operations.md').has('')).toBe(false);
  });
});
