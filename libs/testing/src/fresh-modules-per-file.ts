import { vi } from 'vitest';

/**
 * A setup file of every project (vitest.shared.ts), run before each test file. The tests run in shared workers
 * (`isolate: false`): one process runs many test files, so node_modules (fastify, undici, ioredis, zod, ...) are
 * loaded once per worker rather than once per file, which was most of the suite's CPU time. The workspace's own
 * modules are still evaluated afresh for each file, as in an isolated worker: no module-level state (a counter, a
 * cache, a registry) carries from one test file into the next.
 */
vi.resetModules();
