// `npm run pack:kvroute`: the installable `kvroute` package, as a tarball in dist/ that
// `npm install -g ./dist/kvroute-<version>.tgz` installs with no registry access: every dependency is
// bundled (tools/build.ts), so the package declares none. Layout:
//   bin/kvroute.mjs  the command (tools/package/kvroute.mjs): kvroute router|poller|sim|bench|demo|api-key
//   dist/*.mjs       one bundle per command, plus the oracle router the benchmarks start
//   scenarios/       the benchmark scenarios (bench/scenarios)
//   build.json       version and commit, for `kvroute --version`
import { spawnSync } from 'node:child_process';
import { chmodSync, copyFileSync, cpSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { isAbsolute, join, relative } from 'node:path';
import { buildInfo } from '../libs/platform/src/build-info';
import { APP_ENTRIES, bundle } from './build';
import { parseCommandLine } from '../libs/platform/src/command-line/parse-command-line';

const root = join(import.meta.dirname, '..');

/** Command bundles: file name in dist/ → entry. The names are the ones bench/src/app-process.ts starts. */
const PACKAGE_BUNDLES: Readonly<Record<string, string>> = {
  router: APP_ENTRIES.router,
  'health-poller': APP_ENTRIES['health-poller'],
  'vllm-sim': APP_ENTRIES['vllm-sim'],
  bench: 'bench/src/bench.ts',
  demo: 'bench/src/demo.ts',
  oracle: 'bench/src/oracle/main.ts',
  'api-key': 'apps/router/src/tenants/new-api-key-main.ts',
};

/**
 * Left out: testcontainers (and its native ssh2/cpu-features) is what @kvroute/testing imports, lazily,
 * only where a Docker engine answers; the benchmarks start a local redis-server (or take a Redis URL).
 */
const TEST_ONLY_PACKAGES = ['@testcontainers/redis', 'testcontainers'];

/**
 * The command that installs `tarball`, relative to the directory the user ran `npm run` in (INIT_CWD) when inside it. The path keeps its
 * `./`: npm reads `dist/kvroute-0.1.0.tgz` without it as the GitHub repository `dist/kvroute-0.1.0.tgz`.
 */
export function installCommand(tarball: string, cwd: string = process.env['INIT_CWD'] ?? process.cwd()): string {
  const path = relative(cwd, tarball);
  const shown = path.startsWith('..') || isAbsolute(path) ? tarball : `./${path}`;
  return `npm install -g ${shown}`;
}

/** Builds the package folder under `outDir` and packs it there; returns the tarball's path. */
export async function packKvroute(
  outDir: string = join(root, 'dist'),
  log: (line: string) => void = () => {},
): Promise<string> {
  const packageDir = join(outDir, 'package');
  rmSync(packageDir, { recursive: true, force: true });
  mkdirSync(join(packageDir, 'bin'), { recursive: true });
  for (const [name, entry] of Object.entries(PACKAGE_BUNDLES)) {
    log(`bundling ${name} (${entry})`);
    await bundle(entry, join(packageDir, 'dist', `${name}.mjs`), { sourcemap: false, external: TEST_ONLY_PACKAGES });
  }
  copyFileSync(join(root, 'tools/package/kvroute.mjs'), join(packageDir, 'bin/kvroute.mjs'));
  chmodSync(join(packageDir, 'bin/kvroute.mjs'), 0o755);
  cpSync(join(root, 'bench/scenarios'), join(packageDir, 'scenarios'), { recursive: true });
  for (const file of ['LICENSE', 'CHANGELOG.md']) copyFileSync(join(root, file), join(packageDir, file));
  const build = buildInfo();
  writeFileSync(join(packageDir, 'build.json'), `${JSON.stringify(build)}\n`);
  const workspace = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
    version: string;
    description: string;
    engines: Record<string, string>;
  };
  const manifest = {
    name: 'kvroute',
    version: build.version,
    description: workspace.description,
    license: 'Apache-2.0',
    type: 'module',
    bin: { kvroute: 'bin/kvroute.mjs' },
    engines: workspace.engines,
    files: ['bin', 'dist', 'scenarios', 'build.json', 'LICENSE', 'CHANGELOG.md', 'README.md'],
  };
  writeFileSync(join(packageDir, 'package.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  writeFileSync(
    join(packageDir, 'README.md'),
    `# kvroute ${build.version}\n\nA KV-cache-aware request router for LLM inference fleets (vLLM, SGLang, llama.cpp).\n\n` +
      '```\nkvroute demo          # the live comparison on this machine (needs redis-server, or runs in memory)\n' +
      'kvroute router --help  # the router and its flags; also: poller, sim, bench, api-key\nkvroute --version\n```\n\n' +
      "Documentation: the repository's README.md and docs/.\n",
  );
  log('packing');
  const packed = spawnSync('npm', ['pack', '--pack-destination', outDir, '--json'], {
    cwd: packageDir,
    encoding: 'utf8',
  });
  if (packed.status !== 0) throw new Error(`npm pack failed: ${packed.stderr}`);
  const [result] = JSON.parse(packed.stdout) as Array<{ filename: string }>;
  if (result === undefined) throw new Error('npm pack wrote no tarball');
  return join(outDir, result.filename);
}

if (process.argv[1] && import.meta.filename === process.argv[1]) {
  parseCommandLine({
    usage: 'npm run pack:kvroute',
    summary:
      'Writes dist/kvroute-<version>.tgz, the installable kvroute command with every dependency bundled,\n' +
      'and prints the command that installs it.',
    options: {},
  });
  const tarball = await packKvroute(join(root, 'dist'), (line) => process.stderr.write(`${line}\n`));
  process.stdout.write(`${tarball}\n\nInstall it with:\n\n  ${installCommand(tarball)}\n`);
}
