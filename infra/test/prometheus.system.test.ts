import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { repoPath } from './stack-files';

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
});
