/**
 * One value per process, however often this module and its importers are evaluated: vitest runs many test files
 * in one worker and evaluates the workspace's modules again for each file (vitest.shared.ts), so a module-level
 * registry of what the process must clean up at exit (and the one exit hook that does it) would be one per file.
 * The value lives on `globalThis` under a registered symbol instead.
 */
export function processWide<T>(name: string, create: () => T): T {
  const registry = globalThis as unknown as Record<symbol, T | undefined>;
  const key = Symbol.for(`@kvroute/testing:${name}`);
  registry[key] ??= create();
  return registry[key];
}
