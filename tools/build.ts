// `npm run build`: one self-contained ES module per app in dist/ (esbuild, dependencies bundled),
// run with plain `node dist/<app>.mjs`: no TypeScript transform at run time, which is what the
// container image (infra/docker), the packed `kvroute` package (tools/pack-kvroute.ts) and the
// overhead benchmark use. Development runs the sources with tsx. The command is tools/build-main.ts.
import { build } from 'esbuild';
import { join } from 'node:path';
import { buildInfo } from '../libs/platform/src/build-info';

const root = join(import.meta.dirname, '..');
export const APP_ENTRIES = {
  router: 'apps/router/src/main.ts',
  'health-poller': 'apps/health-poller/src/main.ts',
  'vllm-sim': 'apps/vllm-sim/src/main.ts',
  'bare-proxy': 'bench/src/bare-proxy-main.ts',
} as const;

/**
 * Packages no bundle can hold, left out of every app bundle and imported at run time, only on the paths
 * that need them (`await import(…)`): zeromq's native addon is found next to its own files (KV events:
 * the sim's publisher, the poller's indexer), piscina starts its workers from its own files (token mode's
 * large prompts). The container image copies them beside the bundles (infra/docker/Dockerfile).
 */
export const RUNTIME_EXTERNALS = ['zeromq', 'piscina'];

/** The tokenizer pool's worker, bundled beside the apps: a bundled router passes it as the pool's workerFile. */
export const TOKENIZER_WORKER_ENTRY = 'libs/tokenization/src/tokenizer-worker.ts';

/** Bundles one entry (a path from the repository root) into `outfile`. */
/** `external`: packages left out of the bundle beside RUNTIME_EXTERNALS. */
export async function bundle(
  entry: string,
  outfile: string,
  options: { sourcemap?: boolean; external?: string[] } = {},
): Promise<void> {
  await build({
    entryPoints: [join(root, entry)],
    outfile,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    sourcemap: options.sourcemap ?? true,
    logLevel: 'warning',
    external: [...RUNTIME_EXTERNALS, ...(options.external ?? [])],
    // Written into every bundle: an installed package or an image has no checkout to read (build-info.ts).
    define: { __KVROUTE_BUILD__: JSON.stringify(buildInfo()) },
    // Some bundled CommonJS dependencies call require(); give the ES module one.
    banner: {
      js: "import { createRequire as __kvrouteCreateRequire } from 'node:module'; const require = __kvrouteCreateRequire(import.meta.url);",
    },
  });
}

/** Builds `names` (default: every app) into `outDir` (default `dist/`; tests build into a temporary folder). */
export async function buildApps(
  names: ReadonlyArray<keyof typeof APP_ENTRIES> = Object.keys(APP_ENTRIES) as Array<keyof typeof APP_ENTRIES>,
  outDir: string = join(root, 'dist'),
): Promise<Record<string, string>> {
  const outputs: Record<string, string> = {};
  for (const name of names) {
    const outfile = join(outDir, `${name}.mjs`);
    await bundle(APP_ENTRIES[name], outfile);
    outputs[name] = outfile;
  }
  if (names.includes('router')) await bundle(TOKENIZER_WORKER_ENTRY, join(outDir, 'tokenizer-worker.mjs'));
  return outputs;
}
