import { configDefaults, defineConfig } from 'vitest/config';

/** Tests that need a system tool (haproxy, wrk, promtool, Compose, kubectl): `*.system.test.ts`, run by `npm run test:system`. */
const SYSTEM_TESTS = '**/*.system.test.ts';

/**
 * The test options of one project, for its own vitest.config.ts (createVitestConfig) and for the workspace's
 * (vitest.config.ts at the root, which runs every project in one vitest). Tests beside source (`*.test.ts`) and
 * integration tests under `test/`. Two sets, chosen by vitest's mode:
 * - `vitest run` (`npm test`): every test except the system tests. It needs Node and a Redis, nothing else.
 * - `vitest run --mode system` (Nx target `test-system`, `npm run test:system`): only the system tests.
 */
export function projectTestOptions(projectName: string, mode: string | undefined) {
  const system = mode === 'system';
  return {
    name: projectName,
    include: system ? [`src/${SYSTEM_TESTS}`, `test/${SYSTEM_TESTS}`] : ['src/**/*.test.ts', 'test/**/*.test.ts'],
    exclude: system ? configDefaults.exclude : [...configDefaults.exclude, SYSTEM_TESTS],
    environment: 'node',
    // `npm test`'s files share workers (libs/testing/src/fresh-modules-per-file.ts says why and what stays
    // fresh); the system tests keep a process per file, as they are few and start processes of their own.
    isolate: system,
    setupFiles: system ? [] : [`${import.meta.dirname}/libs/testing/src/fresh-modules-per-file.ts`],
    // In a shared worker a stubbed variable would outlive its file.
    unstubEnvs: true,
    testTimeout: 20_000,
    hookTimeout: 30_000,
  };
}

/**
 * A project's own vitest config (`nx test <project>`, `nx test-system <project>`): projectTestOptions, and a JSON
 * report in test-reports/<target>/<project>.json, which tools/test-summary.mjs sums into the closing
 * `N passed, N failed, N skipped` line.
 */
export function createVitestConfig(projectName: string) {
  return defineConfig(({ mode }) => ({
    test: {
      ...projectTestOptions(projectName, mode),
      reporters: [
        'default',
        [
          'json',
          {
            outputFile: `${import.meta.dirname}/test-reports/${mode === 'system' ? 'test-system' : 'test'}/${projectName}.json`,
          },
        ],
      ],
    },
  }));
}
