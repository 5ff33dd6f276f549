/**
 * .github/workflows/ci.yml, checked without GitHub: valid YAML of the workflow's shape, the same test
 * commands as .ci/run, npm scripts and files that exist, and the Node versions the project supports.
 */
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { readRepoFile, readYaml, repoPath } from './stack-files';

interface Step {
  readonly uses?: string;
  readonly run?: string;
  readonly with?: Record<string, unknown>;
}
interface Job {
  readonly 'runs-on': string;
  readonly steps: readonly Step[];
  readonly strategy?: { readonly matrix?: { readonly node?: readonly string[] } };
  readonly 'timeout-minutes'?: number;
}
interface Workflow {
  readonly name: string;
  readonly on: Record<string, unknown>;
  readonly jobs: Record<string, Job>;
}

const workflow = readYaml<Workflow>('.github/workflows/ci.yml');
const manifest = JSON.parse(readRepoFile('package.json')) as {
  scripts: Record<string, string>;
  engines: { node: string };
};
const runs = Object.values(workflow.jobs).flatMap((job) =>
  job.steps.flatMap((step) => (step.run === undefined ? [] : [step.run])),
);

describe('.github/workflows/ci.yml', () => {
  it('is a workflow: triggers, and jobs with a runner, a time limit and steps', () => {
    expect(Object.keys(workflow.on)).toEqual(expect.arrayContaining(['push', 'pull_request']));
    expect(Object.keys(workflow.jobs)).toEqual(expect.arrayContaining(['test', 'image']));
    for (const [name, job] of Object.entries(workflow.jobs)) {
      expect(job['runs-on'], name).toMatch(/^ubuntu-/);
      expect(job['timeout-minutes'], name).toBeGreaterThan(0);
      expect(job.steps.length, name).toBeGreaterThan(0);
      for (const step of job.steps)
        expect(step.uses !== undefined || step.run !== undefined, `${name}: a step that neither uses nor runs`).toBe(
          true,
        );
    }
  });

  it("runs .ci/run's test commands, and only npm scripts that exist", () => {
    const ciRun = readRepoFile('.ci/run');
    for (const command of ['npm ci', 'npm test', 'npm run test:system']) {
      expect(ciRun, command).toContain(command);
      expect(
        runs.some((run) => run.includes(command)),
        command,
      ).toBe(true);
    }
    const scripts = runs.flatMap((run) => [...run.matchAll(/npm run ([\w:-]+)/g)].map((match) => match[1] as string));
    expect(scripts.length).toBeGreaterThan(0);
    for (const script of scripts) expect(Object.keys(manifest.scripts), script).toContain(script);
  });

  it('tests on the supported Node versions: the engines floor and 22 LTS', () => {
    const floor = /^>=(\d+)/.exec(manifest.engines.node)?.[1];
    const versions = workflow.jobs['test']?.strategy?.matrix?.node ?? [];
    expect(versions).toContain(floor);
    expect(versions).toContain('22');
    const setupNode = workflow.jobs['test']?.steps.find((step) => step.uses?.startsWith('actions/setup-node@'));
    expect(setupNode?.with?.['node-version']).toBe('${{ matrix.node }}');
  });

  it('builds the image from the Dockerfile that exists, with the commit it reports', () => {
    const build = runs.find((run) => run.startsWith('docker build'));
    const dockerfile = / -f (\S+)/.exec(build ?? '')?.[1];
    expect(dockerfile).toBeDefined();
    expect(existsSync(repoPath(dockerfile as string))).toBe(true);
    expect(build).toContain('KVROUTE_COMMIT=');
    expect(readRepoFile(dockerfile as string)).toMatch(/^ARG KVROUTE_COMMIT/m);
  });
});
