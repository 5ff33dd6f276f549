// The apps the kvroute image runs, shared by entrypoint.mjs (which one to start) and healthcheck.mjs
// (where it answers). Bundles are tools/build.ts outputs in dist/ beside this file; ports, env prefixes
// and probe paths are the apps' own (docs/configuration.md); infra/test/dockerfile.test.ts keeps them
// in step with the config schemas and the build.

/**
 * @typedef {object} ImageApp
 * @property {string} [bundle] dist/<bundle>: the esbuild output the runtime image ships
 * @property {string} [source] a TypeScript entry run with tsx (only in the `bench` build target, which has the sources)
 * @property {string} [envPrefix] the app's env var prefix (its port is `<prefix>PORT`)
 * @property {number} [defaultPort] the app's default port
 * @property {string} [healthPath] liveness probe path
 */

/** @type {Readonly<Record<string, ImageApp>>} */
export const APPS = Object.freeze({
  router: { bundle: 'router.mjs', envPrefix: 'KVROUTE_', defaultPort: 8080, healthPath: '/healthz' },
  poller: { bundle: 'health-poller.mjs', envPrefix: 'KVROUTE_POLLER_', defaultPort: 9464, healthPath: '/healthz' },
  sim: { bundle: 'vllm-sim.mjs', envPrefix: 'KVROUTE_SIM_', defaultPort: 8001, healthPath: '/health' },
  bench: { source: 'bench/src/bench.ts' },
});

/**
 * Other spellings accepted on the command line (the package names).
 * @type {Readonly<Record<string, string>>}
 */
export const ALIASES = Object.freeze({ 'health-poller': 'poller', 'vllm-sim': 'sim' });

/**
 * The app a command-line word names, with its canonical name.
 * @param {string | undefined} word
 * @returns {{ name: string, app: ImageApp } | undefined}
 */
export function resolveApp(word) {
  if (word === undefined) return undefined;
  const name = ALIASES[word] ?? word;
  const app = Object.hasOwn(APPS, name) ? APPS[name] : undefined;
  return app === undefined ? undefined : { name, app };
}

export const USAGE = `usage: <image> APP [flags…]   APP: ${Object.keys(APPS).join(' | ')}
  router   kvroute router        (flags and KVROUTE_* env: docs/configuration.md)
  poller   health poller         (KVROUTE_POLLER_*)
  sim      simulated vLLM worker (KVROUTE_SIM_*)
  bench    benchmark runner      (image built with --target bench)
  APP --help prints every option of that app.
`;
