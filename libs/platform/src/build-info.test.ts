import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { buildInfo, fromCheckout, versionLine } from './build-info';

const temporary: string[] = [];
afterEach(() => {
  for (const dir of temporary.splice(0)) rmSync(dir, { recursive: true, force: true });
});

/** A checkout of one commit (git is on every machine that runs the tests: they run from a clone). */
function checkout(): { root: string; commit: string } {
  const root = mkdtempSync(join(tmpdir(), 'kvroute-build-info-'));
  temporary.push(root);
  writeFileSync(join(root, 'package.json'), JSON.stringify({ name: 'x', version: '9.8.7', workspaces: [] }));
  const git = (...args: string[]): string =>
    execFileSync('git', ['-C', root, ...args], {
      encoding: 'utf8',
      env: {
        ...process.env,
        GIT_AUTHOR_NAME: 't',
        GIT_AUTHOR_EMAIL: 't@t',
        GIT_COMMITTER_NAME: 't',
        GIT_COMMITTER_EMAIL: 't@t',
      },
    }).trim();
  git('init', '-q');
  git('add', 'package.json');
  git('commit', '-qm', 'one');
  return { root, commit: git('rev-parse', 'HEAD') };
}

describe('buildInfo', () => {
  it("reads a checkout's version and HEAD commit, loose or packed, without git", () => {
    const { root, commit } = checkout();
    expect(fromCheckout(root)).toEqual({ version: '9.8.7', commit });
    execFileSync('git', ['-C', root, 'pack-refs', '--all']);
    expect(fromCheckout(root)).toEqual({ version: '9.8.7', commit });
  });

  it('says unknown where there is no checkout, and takes KVROUTE_COMMIT when it is a commit id', () => {
    expect(fromCheckout(null)).toEqual({ version: '0.0.0', commit: 'unknown' });
    expect(buildInfo({ KVROUTE_COMMIT: 'abcdef1234567' }).commit).toBe('abcdef1234567');
    expect(buildInfo({ KVROUTE_COMMIT: 'not a commit; rm -rf' }).commit).not.toContain('rm');
  });

  it('is this repository when run from its sources', () => {
    const info = buildInfo({});
    expect(info.version).toMatch(/^\d+\.\d+\.\d+/);
    expect(versionLine(info)).toMatch(/^kvroute \d+\.\d+\.\d+\S* \(commit ([0-9a-f]{12}|unknown)\)$/);
  });
});
