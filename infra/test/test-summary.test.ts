/**
 * `npm test`'s closing line comes from tools/test-summary.mjs, over the JSON reports of the vitest runs
 * tools/run-tests.mjs starts. A run that crashes before writing its report must not vanish from the counts (the
 * projects it covers also have files in the other run's report): `--expect=<report>` counts a missing one as a
 * failure. Run on a scratch workspace of one project, with the summary's own files copied in.
 */
import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { repoPath } from './stack-files';

describe('test-summary.mjs', () => {
  let root: string;

  beforeAll(() => {
    root = mkdtempSync(join(tmpdir(), 'kvroute-summary-'));
    mkdirSync(join(root, 'tools'));
    for (const file of ['test-summary.mjs', 'workspace-projects.mjs'])
      copyFileSync(repoPath('tools', file), join(root, 'tools', file));
    writeFileSync(join(root, 'package.json'), JSON.stringify({ workspaces: ['libs/*'] }));
    mkdirSync(join(root, 'libs', 'one'), { recursive: true });
    writeFileSync(join(root, 'libs', 'one', 'package.json'), JSON.stringify({ scripts: { test: 'vitest run' } }));
    mkdirSync(join(root, 'test-reports', 'test'), { recursive: true });
    const report = {
      testResults: [
        {
          name: join(root, 'libs', 'one', 'src', 'a.test.ts'),
          status: 'passed',
          message: '',
          assertionResults: [{ status: 'passed', fullName: 'a works' }],
        },
      ],
    };
    writeFileSync(join(root, 'test-reports', 'test', 'workspace-side-by-side.json'), JSON.stringify(report));
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  const summary = (...args: string[]) => {
    const run = spawnSync(process.execPath, [join(root, 'tools', 'test-summary.mjs'), 'test', ...args], {
      cwd: root,
      encoding: 'utf8',
    });
    return { status: run.status, lastLine: run.stdout.trimEnd().split('\n').at(-1), stdout: run.stdout };
  };

  it('passes when every expected report is there', () => {
    expect(summary('--expect=workspace-side-by-side.json')).toMatchObject({
      status: 0,
      lastLine: '1 passed, 0 failed, 0 skipped',
    });
  });

  it('counts an expected report that is missing as a failure, and says which', () => {
    const run = summary('--expect=workspace-side-by-side.json', '--expect=workspace-alone.json');
    expect(run.status).toBe(1);
    expect(run.lastLine).toBe('1 passed, 1 failed, 0 skipped');
    expect(run.stdout).toContain('no report: test-reports/test/workspace-alone.json');
  });
});
