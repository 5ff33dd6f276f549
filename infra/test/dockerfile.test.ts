import { readdirSync, existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { POLLER_ENV_PREFIX, PollerConfig } from '@kvroute/health-poller/config';
import { ROUTER_ENV_PREFIX, RouterConfig } from '@kvroute/router/config';
import { SIM_ENV_PREFIX, SimConfig } from '@kvroute/vllm-sim/config';
import { APPS } from '../docker/apps.mjs';
import { APP_ENTRIES } from '../../tools/build';
import { execForm, parseDockerfile, readRepoFile, repoPath, type DockerStage } from './stack-files';

const { args, stages } = parseDockerfile(readRepoFile('infra/docker/Dockerfile'));
const stage = (name: string): DockerStage => {
  const found = stages.find((candidate) => candidate.name === name);
  if (!found) throw new Error(`Dockerfile has no stage ${name}`);
  return found;
};
const instructions = (of: DockerStage, keyword: string) =>
  of.instructions.filter((instruction) => instruction.keyword === keyword);
const argDefault = (name: string) =>
  args
    .find((instruction) => instruction.keyword === 'ARG' && instruction.args.startsWith(`${name}=`))
    ?.args.slice(name.length + 1);
const baseImage = (of: DockerStage) =>
  of.from.replace(/^\$\{(\w+)\}$/, (_match, name: string) => argDefault(name) ?? '');

/** Workspace folders of the root package.json (`apps/*` style globs expanded). */
function workspaceFolders(): string[] {
  const { workspaces } = JSON.parse(readRepoFile('package.json')) as { workspaces: string[] };
  return workspaces.flatMap((pattern) =>
    pattern.endsWith('/*')
      ? readdirSync(repoPath(pattern.slice(0, -2)), { withFileTypes: true })
          .filter(
            (entry) => entry.isDirectory() && existsSync(repoPath(pattern.slice(0, -2), entry.name, 'package.json')),
          )
          .map((entry) => `${pattern.slice(0, -2)}/${entry.name}`)
      : [pattern],
  );
}

describe('infra/docker/Dockerfile', () => {
  it('is multi-stage: deps (npm ci), build (npm run build), bench, and a runtime stage that is the default target', () => {
    expect(stages.map((candidate) => candidate.name)).toEqual(['deps', 'build', 'bench', 'runtime']);
    expect(instructions(stage('deps'), 'RUN').map((run) => run.args)).toContainEqual(
      expect.stringMatching(/^npm ci\b/),
    );
    expect(stage('build').from).toBe('deps');
    expect(instructions(stage('build'), 'RUN').map((run) => run.args)).toContain('npm run build');
    expect(stages.at(-1)?.name).toBe('runtime');
  });

  it('installs with every workspace package.json copied first (else npm ci fails on the lockfile)', () => {
    const deps = stage('deps');
    const npmCi = deps.instructions.findIndex(
      (instruction) => instruction.keyword === 'RUN' && instruction.args.startsWith('npm ci'),
    );
    const copied = deps.instructions
      .slice(0, npmCi)
      .filter((instruction) => instruction.keyword === 'COPY')
      .flatMap((instruction) => instruction.args.split(/\s+/).slice(0, -1));
    expect(copied).toEqual(expect.arrayContaining(['package.json', 'package-lock.json']));
    for (const folder of workspaceFolders()) expect(copied, folder).toContain(`${folder}/package.json`);
  });

  it('runs on a small Node image with the bundles only, not on the build stage', () => {
    const runtime = stage('runtime');
    expect(baseImage(runtime)).toMatch(/^node:22[\w.-]*-(?:bookworm-slim|alpine)/);
    const fromBuild = instructions(runtime, 'COPY').filter((copy) => copy.args.startsWith('--from=build'));
    const copiedBundles = fromBuild
      .flatMap((copy) => copy.args.split(/\s+/).slice(1, -1))
      .filter((path) => path.endsWith('.mjs'));
    const bundles = Object.values(APPS).flatMap((app) => (app.bundle === undefined ? [] : [`/app/dist/${app.bundle}`]));
    // And the router's tokenizer worker (token mode's thread pool), which `npm run build` bundles beside it.
    expect(copiedBundles.sort()).toEqual([...bundles, '/app/dist/tokenizer-worker.mjs'].sort());
  });

  it('runs as a non-root user in the images that run code', () => {
    for (const name of ['runtime', 'bench']) {
      const users = instructions(stage(name), 'USER');
      expect(users.length, name).toBeGreaterThan(0);
      expect(users.at(-1)?.args, name).not.toMatch(/^(root|0)(:|$)/);
    }
  });

  it('has a HEALTHCHECK running healthcheck.mjs, and dispatches on the app name through entrypoint.mjs', () => {
    const runtime = stage('runtime');
    const [healthcheck] = instructions(runtime, 'HEALTHCHECK');
    expect(healthcheck).toBeDefined();
    expect(execForm(healthcheck?.args ?? '')).toEqual(['node', '/app/healthcheck.mjs']);
    const entrypoint = execForm(instructions(runtime, 'ENTRYPOINT')[0]?.args ?? '');
    expect(entrypoint[0]).toBe('node');
    expect(entrypoint.at(-1)).toBe('/app/entrypoint.mjs');
    expect(execForm(instructions(runtime, 'CMD')[0]?.args ?? '')).toEqual(['router']);
    const scripts = instructions(runtime, 'COPY').filter((copy) => copy.args.includes('infra/docker/'));
    expect(scripts.flatMap((copy) => copy.args.split(/\s+/).slice(0, -1)).sort()).toEqual([
      'infra/docker/apps.mjs',
      'infra/docker/entrypoint.mjs',
      'infra/docker/healthcheck.mjs',
    ]);
    expect(execForm(instructions(stage('bench'), 'ENTRYPOINT')[0]?.args ?? '')).toEqual([
      'node',
      '/app/entrypoint.mjs',
    ]);
  });
});

describe('infra/docker/apps.mjs (what the entry point dispatches to)', () => {
  it('covers router, poller, sim and bench', () => {
    expect(Object.keys(APPS)).toEqual(['router', 'poller', 'sim', 'bench']);
  });

  it('names bundles that `npm run build` produces (tools/build.ts) and a bench entry that exists', () => {
    for (const [name, app] of Object.entries(APPS)) {
      if (app.bundle !== undefined)
        expect(
          Object.keys(APP_ENTRIES).map((entry) => `${entry}.mjs`),
          name,
        ).toContain(app.bundle);
      if (app.source !== undefined) expect(existsSync(repoPath(app.source)), app.source).toBe(true);
    }
  });

  it("agrees with the apps' config schemas on env prefixes and default ports", () => {
    const schemas = {
      router: { prefix: ROUTER_ENV_PREFIX, port: RouterConfig.shape.port.parse(undefined) },
      poller: { prefix: POLLER_ENV_PREFIX, port: PollerConfig.shape.port.parse(undefined) },
      sim: { prefix: SIM_ENV_PREFIX, port: SimConfig.shape.port.parse(undefined) },
    };
    for (const [name, schema] of Object.entries(schemas)) {
      const app = APPS[name];
      expect(app?.envPrefix, name).toBe(schema.prefix);
      expect(app?.defaultPort, name).toBe(schema.port);
    }
  });
});

describe('.dockerignore', () => {
  it('keeps dependencies, build output, git data and local results out of the build context', () => {
    const ignored = readRepoFile('.dockerignore')
      .split('\n')
      .map((line) => line.trim())
      .filter((line) => line !== '' && !line.startsWith('#'));
    expect(ignored).toEqual(expect.arrayContaining(['**/node_modules', 'dist', '.git', 'bench/results']));
  });
});
