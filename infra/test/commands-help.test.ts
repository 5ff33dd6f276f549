/**
 * Issue 31, "every command": each npm script of the root package.json answers `--help` (exit 0, its usage line
 * first) and `--version` (the build), and refuses an unknown flag with one line on stderr and exit code 2, never a
 * stack trace. The scripts are read from package.json, so a new one is checked without anyone adding it here.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { buildInfo, versionLine } from '@kvroute/platform';
import { build } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { repoPath } from './stack-files';

/** Scripts that run the workspace's own tooling (biome, eslint, tsc, vitest, nx), not a kvroute command. */
const TOOLING_SCRIPTS = new Set(['test', 'test:system', 'format', 'format:check', 'lint', 'typecheck']);

const { scripts } = JSON.parse(readFileSync(repoPath('package.json'), 'utf8')) as {
  scripts: Record<string, string>;
};
const commands = Object.entries(scripts).filter(([name]) => !TOOLING_SCRIPTS.has(name));

interface Run {
  readonly status: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

/**
 * Each command's entry bundled by esbuild, the transform tsx runs them through, into one folder (code split: a module
 * two commands share is in one chunk, and each entry keeps its own `import.meta`), and the bundle run with plain node.
 * Through tsx's loader a run cost ~0.7 s of CPU, most of it the loader's start (75 runs: ~50 CPU-s and the longest
 * file of `npm test`); a bundle's ~0.2 s. The workspace's own packages (@kvroute/*) are TypeScript and go into the
 * bundles. A third-party package stays outside (some hold native addons), imported by the absolute path its importer
 * resolves it to, so a project's own copy (libs/platform's yaml, say) is the one that runs, as under tsx; Node's
 * built-ins stay as named. What a bundle cannot show: an import cycle that reads a binding before it is set throws
 * under tsx and reads undefined here (esbuild makes top-level `const` a `var`); tools/check-import-cycles.mjs, which
 * `npm test` runs first, refuses such cycles.
 */
let bundles = '';
/** Marks the plugin's own resolve calls, which it leaves to esbuild. */
const RESOLVING = Symbol('resolving');

beforeAll(async () => {
  const cache = repoPath('node_modules', '.cache');
  mkdirSync(cache, { recursive: true });
  bundles = mkdtempSync(join(cache, 'kvroute-commands-'));
  await build({
    entryPoints: commands.map(([name, command]) => ({ in: repoPath(entryOf(command)), out: bundleName(name) })),
    outdir: bundles,
    bundle: true,
    splitting: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    logLevel: 'warning',
    // `.mjs`: the folder is under node_modules, where no package.json says the files are modules.
    outExtension: { '.js': '.mjs' },
    plugins: [
      {
        name: 'packages-where-their-importers-find-them',
        setup(builder) {
          builder.onResolve({ filter: /^[^./]/ }, async ({ path, importer, resolveDir, kind, pluginData }) => {
            if (path.startsWith('@kvroute/') || pluginData === RESOLVING) return undefined;
            const found = await builder.resolve(path, { importer, resolveDir, kind, pluginData: RESOLVING });
            if (found.errors.length > 0) return { errors: found.errors };
            return { path: found.external ? path : found.path, external: true };
          });
        },
      },
    ],
  });
}, 60_000);

afterAll(() => {
  if (bundles !== '') rmSync(bundles, { recursive: true, force: true });
});

/** A command script is `tsx FILE`: FILE. */
function entryOf(command: string): string {
  const [runner, entry, ...rest] = command.split(' ');
  if (runner !== 'tsx' || entry === undefined || rest.length > 0)
    throw new Error(`"${command}": a command script is \`tsx FILE\` (or add it to TOOLING_SCRIPTS with a reason)`);
  return entry;
}

function bundleName(script: string): string {
  return script.replaceAll(':', '-');
}

/** Runs the command `name`'s bundle with `args`, from the repository root as `npm run` does. */
function runScript(name: string, args: readonly string[]): Promise<Run> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(bundles, `${bundleName(name)}.mjs`), ...args], {
      cwd: repoPath(),
      // No KVROUTE_* from the caller's environment: a config file or Redis URL there must not change the answer.
      env: Object.fromEntries(Object.entries(process.env).filter(([variable]) => !variable.startsWith('KVROUTE_'))),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const timer = setTimeout(() => child.kill('SIGKILL'), 45_000);
    child.on('error', reject);
    child.on('close', (status) => {
      clearTimeout(timer);
      resolve({ status, stdout, stderr });
    });
  });
}

describe("the README's install line", () => {
  it('installs the tarball pack:kvroute writes for this version, by a path npm reads as a file (./, not a GitHub repo)', () => {
    const { version } = JSON.parse(readFileSync(repoPath('package.json'), 'utf8')) as { version: string };
    const readme = readFileSync(repoPath('README.md'), 'utf8');
    const installLines = readme.split('\n').filter((line) => /npm install (-g|--global) /.test(line));
    expect(installLines.length).toBeGreaterThan(0);
    for (const line of installLines)
      expect(line).toMatch(new RegExp(`npm install -g \\./dist/kvroute-${version.replaceAll('.', '\\.')}\\.tgz`));
  });
});

describe('every npm script is a command that explains itself', () => {
  it('finds the commands in package.json', () => {
    expect(commands.map(([name]) => name)).toEqual(
      expect.arrayContaining(['demo', 'sim', 'router', 'api-key', 'poller', 'bench', 'bench:block-size']),
    );
  });

  it.each(commands)(
    'npm run %s: --help, --version, and an unknown flag',
    async (name) => {
      const [help, version, unknown] = await Promise.all([
        runScript(name, ['--help']),
        runScript(name, ['--version']),
        runScript(name, ['--definitely-not-a-flag']),
      ]);
      expect(help.status, help.stderr).toBe(0);
      expect(help.stdout.split('\n')[0]).toMatch(
        new RegExp(`^npm run ${name.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}( |$)`),
      );
      expect(help.stderr).toBe('');

      expect(version.status, version.stderr).toBe(0);
      expect(version.stdout.trim()).toBe(versionLine(buildInfo()));

      expect(unknown.status, unknown.stderr).toBe(2);
      expect(unknown.stdout).toBe('');
      expect(unknown.stderr.trimEnd().split('\n')).toHaveLength(1);
      expect(unknown.stderr).toContain('--definitely-not-a-flag');
    },
    60_000,
  );
});
