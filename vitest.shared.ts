import { configDefaults, defineConfig } from 'vitest/config';

/** Tests that need a system tool (haproxy, wrk, promtool, Compose, kubectl): `*.system.test.ts`, run by `npm run test:system`. */
const SYSTEM_TESTS = '**/*.system.test.ts';

/**
 * One vitest setup for every project: tests beside source (`*.test.ts`) and integration tests under
 * `test/`. Two sets, chosen by vitest's mode:
 * - `vitest run` (Nx target `test`, `npm test`): every test except the system tests. It needs Node and
 *   a Redis, nothing else.
 * - `vitest run --mode system` (Nx target `test-system`, `npm run test:system`): only the system tests.
 * Each run writes a JSON report to test-reports/<target>/<project>.json, which tools/test-summary.mjs
 * sums into the closing `N passed, N failed, N skipped` line.
 */
export function createVitestConfig(projectName: string, options: { testTimeoutMs?: number } = {}) {
  return defineConfig(({ mode }) => {
    const system = mode === 'system';
    return {
      test: {
        include: system ? [`src/${SYSTEM_TESTS}`, `test/${SYSTEM_TESTS}`] : ['src/**/*.test.ts', 'test/**/*.test.ts'],
        exclude: system ? configDefaults.exclude : [...configDefaults.exclude, SYSTEM_TESTS],
        environment: 'node',
        testTimeout: options.testTimeoutMs ?? 20_000,
        hookTimeout: 30_000,
        reporters: [
          'default',
          [
            'json',
            {
              outputFile: `${import.meta.dirname}/test-reports/${system ? 'test-system' : 'test'}/${projectName}.json`,
            },
          ],
        ],
      },
    };
  });
}
