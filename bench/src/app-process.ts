import { join } from 'node:path';

/**
 * How the benchmarks start kvroute's processes (sims, routers, the poller, the oracle router): from the
 * sources with tsx in a checkout, or from the bundles beside the running one in the installed `kvroute`
 * package (its launcher, tools/package/kvroute.mjs, sets `KVROUTE_BUNDLE_DIR`; the bundles have no
 * sources to point tsx at).
 */
export type KvrouteProcess = 'vllm-sim' | 'router' | 'health-poller' | 'oracle';

const repoRoot = join(import.meta.dirname, '..', '..');

const SOURCES: Readonly<Record<KvrouteProcess, string>> = {
  'vllm-sim': 'apps/vllm-sim/src/main.ts',
  router: 'apps/router/src/main.ts',
  'health-poller': 'apps/health-poller/src/main.ts',
  oracle: 'bench/src/oracle/main.ts',
};

/** The folder of the installed package's bundles, or null in a checkout. */
export function bundleDir(env: Readonly<Record<string, string | undefined>> = process.env): string | null {
  const dir = env['KVROUTE_BUNDLE_DIR'];
  return dir === undefined || dir === '' ? null : dir;
}

/** Node's arguments before the app's own flags: `[bundle]` or `['--import', 'tsx', source]`. */
export function nodeArgsFor(
  app: KvrouteProcess,
  env: Readonly<Record<string, string | undefined>> = process.env,
): string[] {
  const bundles = bundleDir(env);
  return bundles === null ? ['--import', 'tsx', join(repoRoot, SOURCES[app])] : [join(bundles, `${app}.mjs`)];
}

/** Where the benchmark scenarios are: bench/scenarios, or the package's copy beside its bundles. */
export function scenarioDir(env: Readonly<Record<string, string | undefined>> = process.env): string {
  const bundles = bundleDir(env);
  return bundles === null ? join(repoRoot, 'bench', 'scenarios') : join(bundles, '..', 'scenarios');
}

/** Where results go by default: bench/results in a checkout, ./kvroute-results when installed (never inside the package). */
export function resultsDir(env: Readonly<Record<string, string | undefined>> = process.env): string {
  return bundleDir(env) === null ? join(repoRoot, 'bench', 'results') : join(process.cwd(), 'kvroute-results');
}
