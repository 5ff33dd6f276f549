import { defineConfig } from 'vitest/config';

/**
 * One vitest setup for every project: tests beside source (`*.test.ts`) and integration tests under
 * `test/`. Each run also writes a JSON report that `.ci/run` sums into the closing `N passed, N failed` line.
 */
export function createVitestConfig(projectName: string, options: { testTimeoutMs?: number } = {}) {
  return defineConfig({
    test: {
      include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
      environment: 'node',
      testTimeout: options.testTimeoutMs ?? 20_000,
      hookTimeout: 30_000,
      reporters: ['default', ['json', { outputFile: `${import.meta.dirname}/test-reports/${projectName}.json` }]],
    },
  });
}
