// Lint for the whole workspace. The module-boundary rule is the point of this file:
// deciding (type:domain), remembering (type:data-access) and sending (type:app) stay separate,
// and pure libs cannot import I/O packages. A new dependency direction is a change here, in review.
import nx from '@nx/eslint-plugin';
import tseslint from 'typescript-eslint';

const IO_PACKAGES = [
  'ioredis',
  'fastify',
  'undici',
  'bullmq',
  'prom-client',
  'pino',
  'node:net',
  'node:http',
  'node:fs',
  'fs',
  'net',
  'http',
];

/**
 * Node built-ins that do I/O or reach outside the process: the boundary rule's bannedExternalImports
 * does not see built-ins, so pure libs get them banned here (node:buffer, node:crypto stay allowed:
 * computation only).
 */
const IO_BUILTINS = [
  'fs',
  'fs/promises',
  'net',
  'http',
  'https',
  'http2',
  'dgram',
  'dns',
  'child_process',
  'cluster',
  'worker_threads',
  'tls',
  'readline',
].flatMap((name) => [name, `node:${name}`]);

/**
 * Libraries that a command's entry loads with `await import(…)` once its command line is accepted (so that --help,
 * --version and a mistyped flag answer without them: apps/router/src/main.ts, the bench commands), while other
 * files of the same project import them statically. Nx reads a dynamic import as a lazy-loaded chunk that a static
 * import elsewhere would defeat; here it only defers loading (Node, and the one-file bundles of tools/build.ts).
 */
const DEFERRED_IMPORTS = ['@kvroute/**'];

export default [
  { ignores: ['**/node_modules/**', '**/dist/**', '**/.nx/**', '**/test-reports/**', '**/coverage/**'] },
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts', '**/*.mjs'],
    plugins: { '@nx': nx },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
      'no-console': 'off',
      '@nx/enforce-module-boundaries': [
        'error',
        {
          enforceBuildableLibDependency: false,
          checkDynamicDependenciesExceptions: DEFERRED_IMPORTS,
          allow: [],
          depConstraints: [
            {
              sourceTag: 'type:app',
              onlyDependOnLibsWithTags: ['type:domain', 'type:data-access', 'type:util', 'type:testing'],
            },
            {
              sourceTag: 'type:data-access',
              onlyDependOnLibsWithTags: ['type:domain', 'type:util'],
              bannedExternalImports: ['fastify', 'undici'],
            },
            { sourceTag: 'type:domain', onlyDependOnLibsWithTags: ['type:domain'], bannedExternalImports: IO_PACKAGES },
            {
              sourceTag: 'type:util',
              onlyDependOnLibsWithTags: ['type:util', 'type:domain'],
              bannedExternalImports: ['ioredis', 'bullmq'],
            },
            { sourceTag: 'type:testing', onlyDependOnLibsWithTags: ['type:domain', 'type:data-access', 'type:util'] },
          ],
        },
      ],
    },
  },
  {
    // Tool configs import the shared root config by path; they are not part of any project's code.
    files: ['**/vitest.config.ts'],
    rules: { '@nx/enforce-module-boundaries': 'off' },
  },
  {
    // Biome wraps code at 120 columns but leaves long strings and comments as written: this holds the sources to
    // 160 (issue 28). Generated files are exempt (their strings are the files they embed).
    files: ['apps/*/src/**/*.ts', 'libs/*/src/**/*.ts', 'bench/src/**/*.ts'],
    ignores: ['**/*.generated.ts'],
    rules: { 'max-len': ['error', { code: 160, tabWidth: 2 }] },
  },
  {
    // Router, health-poller and bench tests start simulated backends in-process (a real HTTP server on
    // loopback): the one app-to-app import allowed, and only from tests.
    files: ['apps/router/test/**/*.ts', 'apps/router/src/**/*.test.ts', 'bench/**/*.test.ts'],
    rules: {
      '@nx/enforce-module-boundaries': [
        'error',
        {
          enforceBuildableLibDependency: false,
          checkDynamicDependenciesExceptions: DEFERRED_IMPORTS,
          allow: ['@kvroute/vllm-sim', '@kvroute/vllm-sim/config'],
          depConstraints: [
            {
              sourceTag: 'type:app',
              onlyDependOnLibsWithTags: ['type:domain', 'type:data-access', 'type:util', 'type:testing'],
            },
          ],
        },
      ],
    },
  },
  {
    // Health-poller tests also run a router in-process: the end-to-end check that routers follow the
    // poller's published states (test/router-follows-poller.test.ts). Tests only.
    files: ['apps/health-poller/test/**/*.ts'],
    rules: {
      '@nx/enforce-module-boundaries': [
        'error',
        {
          enforceBuildableLibDependency: false,
          checkDynamicDependenciesExceptions: DEFERRED_IMPORTS,
          allow: ['@kvroute/vllm-sim', '@kvroute/vllm-sim/config', '@kvroute/router', '@kvroute/router/config'],
          depConstraints: [
            {
              sourceTag: 'type:app',
              onlyDependOnLibsWithTags: ['type:domain', 'type:data-access', 'type:util', 'type:testing'],
            },
          ],
        },
      ],
    },
  },
  {
    // bench:indexer drives the health poller's KV-event indexer in its own process, so its CPU is the one
    // measured (bench is never shipped).
    files: ['bench/src/indexer-load.ts'],
    rules: {
      '@nx/enforce-module-boundaries': [
        'error',
        {
          enforceBuildableLibDependency: false,
          checkDynamicDependenciesExceptions: DEFERRED_IMPORTS,
          allow: ['@kvroute/health-poller/kv-events/indexer', '@kvroute/health-poller/metrics'],
          depConstraints: [
            {
              sourceTag: 'type:app',
              onlyDependOnLibsWithTags: ['type:domain', 'type:data-access', 'type:util', 'type:testing'],
            },
          ],
        },
      ],
    },
  },
  {
    // infra tests check the deployment files against the apps' own definitions (config schemas, metric
    // registries, a sim's /metrics), build the image's bundles with tools/build.ts and pack the kvroute
    // package with tools/pack-kvroute.ts. Tests only.
    files: ['infra/test/**/*.ts'],
    rules: {
      '@nx/enforce-module-boundaries': [
        'error',
        {
          enforceBuildableLibDependency: false,
          checkDynamicDependenciesExceptions: DEFERRED_IMPORTS,
          allow: [
            '@kvroute/router/config',
            '@kvroute/router/metrics',
            '@kvroute/health-poller/config',
            '@kvroute/health-poller/metrics',
            '@kvroute/vllm-sim',
            '@kvroute/vllm-sim/config',
            '../../tools/build',
            '../../tools/pack-kvroute',
            '../../tools/generate-k8s-monitoring',
          ],
          depConstraints: [
            {
              sourceTag: 'type:app',
              onlyDependOnLibsWithTags: ['type:domain', 'type:data-access', 'type:util', 'type:testing'],
            },
          ],
        },
      ],
    },
  },
  {
    // Data-access tests run against a real Redis from @kvroute/testing (type:testing): allowed in their tests only.
    files: ['libs/redis-store/test/**/*.ts', 'libs/redis-store/src/**/*.test.ts'],
    rules: {
      '@nx/enforce-module-boundaries': [
        'error',
        {
          enforceBuildableLibDependency: false,
          checkDynamicDependenciesExceptions: DEFERRED_IMPORTS,
          allow: [],
          depConstraints: [
            {
              sourceTag: 'type:data-access',
              onlyDependOnLibsWithTags: ['type:domain', 'type:util', 'type:testing'],
              bannedExternalImports: ['fastify', 'undici'],
            },
          ],
        },
      ],
    },
  },
  {
    // Tests poke at untyped JSON responses.
    files: ['**/*.test.ts', '**/test/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'off' },
  },
  {
    // type:testing helpers may only be imported from tests.
    files: ['**/src/**/*.ts'],
    ignores: ['**/*.test.ts', '**/test/**'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            { group: ['@kvroute/testing', '@kvroute/testing/*'], message: '@kvroute/testing is for tests only.' },
          ],
        },
      ],
    },
  },
  {
    // Benchmarks that need a private Redis start it as the tests do (startRedis({ fresh: true })), and pick
    // free ports with the tests' findFreePort(s) rather than a copy; bench:cells starts a local cluster (startRedisCluster); bench is never shipped.
    files: [
      'bench/src/redis-decision.ts',
      'bench/src/route-stages.ts',
      'bench/src/decision-instructions.ts',
      'bench/src/cells-decision.ts',
      'bench/src/overhead.ts',
      'bench/src/limits.ts',
      'bench/src/admission.ts',
      'bench/src/lora.ts',
      'bench/src/router-instructions.ts',
      'bench/src/poller-load.ts',
      'bench/src/indexer-load.ts',
      'bench/src/runner/local-cluster.ts',
      'bench/src/local-sims.ts',
    ],
    rules: { 'no-restricted-imports': 'off' },
  },
  {
    // Pure libraries: no I/O from Node's built-ins either (tests may read fixtures).
    files: [
      'libs/routing/src/**/*.ts',
      'libs/protocols/src/**/*.ts',
      'libs/workloads/src/**/*.ts',
      'libs/engine-metrics/src/**/*.ts',
    ],
    ignores: ['**/*.test.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        { paths: IO_BUILTINS.map((name) => ({ name, message: 'pure (type:domain) libraries do no I/O' })) },
      ],
    },
  },
];
