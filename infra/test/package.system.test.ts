/**
 * Issue 16, acceptance 5: the `kvroute` package as a user gets it. `npm pack` of the package folder
 * (tools/pack-kvroute.ts) → `npm install -g` into a temporary prefix (no registry: every dependency is
 * bundled) → the installed `kvroute` command: --version, demo --help, and a simulated backend started
 * from the installed bundles answering as vLLM does.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildInfo, versionLine } from '@kvroute/platform';
import { findFreePort } from '@kvroute/testing';
import { installCommand, packKvroute } from '../../tools/pack-kvroute';
import { repoPath } from './stack-files';

const work = mkdtempSync(join(tmpdir(), 'kvroute-package-'));
const prefix = join(work, 'prefix');
const kvroute = join(prefix, 'bin', 'kvroute');
let tarball = '';
let sim: ChildProcess | undefined;

beforeAll(async () => {
  tarball = await packKvroute(join(work, 'pack'));
  // The command pack:kvroute prints, run as printed from the folder above the tarball's (plus a private prefix).
  const [npm, ...printed] = installCommand(tarball, work).split(' ');
  const installed = spawnSync(npm as string, [...printed, '--prefix', prefix, '--offline', '--no-audit', '--no-fund'], {
    cwd: work,
    encoding: 'utf8',
    timeout: 120_000,
  });
  if (installed.status !== 0) throw new Error(`npm install -g failed: ${installed.stderr}`);
}, 180_000);

afterAll(() => {
  if (sim?.exitCode === null) sim.kill('SIGKILL');
  rmSync(work, { recursive: true, force: true });
});

/** The installed command, run as a user runs it (its own shebang), from an empty folder. */
function run(args: string[]) {
  return spawnSync(kvroute, args, { cwd: work, encoding: 'utf8', timeout: 30_000 });
}

describe('the packed kvroute package, installed with npm install -g', () => {
  it('prints an install command npm reads as a file, not as a GitHub repository (issue 31)', () => {
    expect(installCommand(tarball, work)).toBe(`npm install -g ./pack/${basename(tarball)}`);
    expect(installCommand('/elsewhere/kvroute-1.0.0.tgz', work)).toBe('npm install -g /elsewhere/kvroute-1.0.0.tgz');
  });

  it('packs a tarball named for the version, with no dependencies to fetch, under Apache-2.0', () => {
    const { version } = JSON.parse(readFileSync(repoPath('package.json'), 'utf8')) as { version: string };
    expect(tarball.endsWith(`kvroute-${version}.tgz`)).toBe(true);
    const manifest = JSON.parse(
      readFileSync(join(prefix, 'lib', 'node_modules', 'kvroute', 'package.json'), 'utf8'),
    ) as Record<string, unknown>;
    expect(manifest['dependencies']).toBeUndefined();
    expect(manifest['license']).toBe('Apache-2.0');
    expect(existsSync(join(prefix, 'lib', 'node_modules', 'kvroute', 'LICENSE'))).toBe(true);
  });

  it('kvroute --version names this build; every command takes --version too', () => {
    const version = run(['--version']);
    expect(version.status).toBe(0);
    expect(version.stdout.trim()).toBe(versionLine(buildInfo()));
    expect(run(['router', '--version']).stdout.trim()).toBe(versionLine(buildInfo()));
  });

  it('every kvroute command answers --help (its usage first), --version, and refuses an unknown flag in one line', () => {
    const listed = [...run(['--help']).stdout.matchAll(/^ {2}([a-z][a-z-]*) {2}/gm)].map((match) => match[1] as string);
    expect(listed).toEqual(['router', 'poller', 'sim', 'bench', 'demo', 'api-key']);
    for (const command of listed) {
      const help = run([command, '--help']);
      expect(help.status, `${command} --help: ${help.stderr}`).toBe(0);
      expect(help.stdout.split('\n')[0], command).toMatch(new RegExp(`^kvroute ${command}( |$)`));
      expect(run([command, '--version']).stdout.trim(), command).toBe(versionLine(buildInfo()));
      const unknown = run([command, '--definitely-not-a-flag']);
      expect(unknown.status, `${command}: ${unknown.stderr}`).toBe(2);
      expect(unknown.stderr.trimEnd().split('\n'), command).toHaveLength(1);
    }
  });

  it('kvroute api-key makes a key: its secret and the key file entry', () => {
    const made = run(['api-key', '--tenant', 'acme']);
    expect(made.status, made.stderr).toBe(0);
    expect(made.stdout).toMatch(/tenant: acme/);
    expect(made.stdout).toMatch(/sha256: [0-9a-f]{64}/);
  });

  it('kvroute demo --help and kvroute --help describe themselves; an unknown command exits 2', () => {
    const demo = run(['demo', '--help']);
    expect(demo.status).toBe(0);
    expect(demo.stdout).toMatch(/kvroute demo \[options\]/);
    const help = run(['--help']);
    expect(help.status).toBe(0);
    for (const command of ['router', 'poller', 'sim', 'bench', 'demo', 'api-key'])
      expect(help.stdout).toMatch(new RegExp(`^  ${command} `, 'm'));
    const unknown = run(['balancer']);
    expect(unknown.status).toBe(2);
    expect(unknown.stderr).toMatch(/unknown command 'balancer'/);
  });

  it('kvroute sim serves a simulated vLLM backend from the installed bundle', async () => {
    const port = await findFreePort();
    sim = spawn(
      kvroute,
      ['sim', '--host', '127.0.0.1', '--port', String(port), '--model', 'packed-model', '--log-level', 'warn'],
      { cwd: work, stdio: ['ignore', 'ignore', 'pipe'] },
    );
    const deadline = Date.now() + 20_000;
    let models: { data: Array<{ id: string }> } | null = null;
    while (models === null && Date.now() < deadline) {
      try {
        const response = await fetch(`http://127.0.0.1:${port}/v1/models`);
        if (response.ok) models = (await response.json()) as { data: Array<{ id: string }> };
      } catch {
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    }
    expect(models?.data.map((model) => model.id)).toEqual(['packed-model']);
  });
});
