// `npm test` runs this after the format and import-cycle checks: lint and typecheck of the whole workspace, one
// eslint and one tsc, side by side (one core each). Nx ran a lint and a typecheck task per project (24 processes,
// two at a time), and each project's tsc checked again every lib it imports: 12 programs where one does the job.
// The per-project targets stay (`nx lint <project>`, `nx typecheck <project>`, `npm run lint`, `npm run typecheck`).
//
// - typecheck: tsconfig.workspace.json, one program of every project's files. Checked first: each project's
//   tsconfig.json has no file that program lacks and no compiler option it sets otherwise.
// - lint: eslint over the project folders. Its module-boundary rule (@nx/enforce-module-boundaries) reads Nx's
//   project graph from .nx/workspace-data, and silently skips itself when there is none (a fresh clone), so
//   `nx show projects` writes it first.
// Both keep a cache under node_modules/.cache/kvroute (tsc's build info; eslint's, keyed by the project manifests
// the boundary rule reads), so a second run checks only what changed. Exits 1 if either fails.
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import ts from 'typescript';
import { workspaceProjectDirs } from './workspace-projects.mjs';

const ROOT = join(import.meta.dirname, '..');
const BIN = join(ROOT, 'node_modules', '.bin');
const CACHE = join(ROOT, 'node_modules', '.cache', 'kvroute');
const WORKSPACE_TSCONFIG = 'tsconfig.workspace.json';
const LINTED = ['apps', 'libs', 'bench', 'infra', 'vitest.config.ts', 'vitest.shared.ts'];

function parseTsconfig(path) {
  const host = {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (diagnostic) => {
      throw new Error(ts.flattenDiagnosticMessageText(diagnostic.messageText, '\n'));
    },
  };
  return ts.getParsedCommandLineOfConfigFile(path, {}, host);
}

/** What the one program would miss of the per-project ones: files it does not include, options it sets otherwise. */
function workspaceProgramGaps() {
  const workspace = parseTsconfig(join(ROOT, WORKSPACE_TSCONFIG));
  const files = new Set(workspace.fileNames);
  const gaps = [];
  for (const dir of workspaceProjectDirs(ROOT)) {
    const path = join(dir, 'tsconfig.json');
    if (!existsSync(path)) continue;
    const project = parseTsconfig(path);
    for (const file of project.fileNames)
      if (!files.has(file))
        gaps.push(`${relative(ROOT, file)} (${relative(ROOT, path)}) is not in ${WORKSPACE_TSCONFIG}`);
    for (const [option, value] of Object.entries(project.options)) {
      if (option === 'configFilePath') continue;
      if (JSON.stringify(value) !== JSON.stringify(workspace.options[option]))
        gaps.push(`${relative(ROOT, path)} sets ${option} to ${JSON.stringify(value)}, ${WORKSPACE_TSCONFIG} does not`);
    }
  }
  return gaps;
}

/** Runs a tool of node_modules/.bin; resolves with its exit status and how long it took. */
function run(name, args) {
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn(join(BIN, name), args, { cwd: ROOT, stdio: 'inherit' });
    child.on('error', (error) => resolve({ name, status: 1, seconds: 0, error }));
    child.on('exit', (status, signal) =>
      resolve({ name, status: status ?? signal, seconds: (Date.now() - started) / 1000 }),
    );
  });
}

/** The boundary rule reads the projects' tags and dependencies: a change to any manifest starts a new lint cache. */
function lintCacheKey() {
  const hash = createHash('sha256');
  for (const dir of [ROOT, ...workspaceProjectDirs(ROOT)]) hash.update(readFileSync(join(dir, 'package.json')));
  hash.update(readFileSync(join(ROOT, 'nx.json')));
  return hash.digest('hex').slice(0, 16);
}

const gaps = workspaceProgramGaps();
if (gaps.length > 0) {
  console.log(`typecheck: ${WORKSPACE_TSCONFIG} does not cover every project:\n  ${gaps.join('\n  ')}`);
  process.exit(1);
}
const typecheck = run('tsc', [
  '-p',
  WORKSPACE_TSCONFIG,
  '--incremental',
  '--tsBuildInfoFile',
  join(CACHE, 'tsc.tsbuildinfo'),
]);
const graph = spawnSync(join(BIN, 'nx'), ['show', 'projects'], { cwd: ROOT, stdio: ['ignore', 'ignore', 'inherit'] });
if (graph.status !== 0) console.log('nx show projects failed: the lint below has no project graph');
const lint = run('eslint', [
  '--cache',
  '--cache-strategy',
  'content',
  '--cache-location',
  join(CACHE, `eslint-${lintCacheKey()}`),
  ...LINTED,
]);
const results = await Promise.all([typecheck, lint]);
for (const result of results) {
  const outcome = result.status === 0 ? 'ok' : `failed (${result.error?.message ?? `exit ${result.status}`})`;
  console.log(`${result.name === 'tsc' ? 'typecheck' : 'lint'}: ${outcome} in ${result.seconds.toFixed(1)} s`);
}
process.exit(graph.status === 0 && results.every((result) => result.status === 0) ? 0 : 1);
