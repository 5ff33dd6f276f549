import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { findFreePorts, startRedis, type TestRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { waitFor } from './start-test-cluster';

/**
 * A replica that dies (SIGKILL, nothing released) leaves leases in Redis; they stop counting within
 * the lease TTL, so the fleet-wide in-flight counts heal by themselves, and the other replicas keep
 * routing meanwhile.
 */
describe('router replica crash', () => {
  let redis: TestRedis;
  let sims: SimServer[];
  let backendUrls: string[];
  let survivor: RouterServer;
  let survivorUrl: string;
  // Long enough that a replica starved of CPU on a busy machine still renews its leases in time (every TTL/3):
  // with 2 s, a 1.3 s stall of the doomed process let 4 of its 20 live leases lapse before the kill.
  const LEASE_TTL_MS = 4_000;

  beforeAll(async () => {
    redis = await startRedis({ fresh: true });
    sims = await Promise.all(
      Array.from({ length: 2 }, () =>
        createSimServer(SimConfig.parse({ port: 0, profile: 'a100-7b', timeScale: 1, model: 'test-model' })),
      ),
    );
    backendUrls = await Promise.all(sims.map((sim) => sim.listen()));
    survivor = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: backendUrls,
        redisUrl: redis.url,
        leaseTtlMs: LEASE_TTL_MS,
        redisTimeoutMs: 500,
      }),
    );
    survivorUrl = await survivor.listen();
  });
  afterAll(async () => {
    // Its one request has its answer: no grace (a graceful close waits a second for quiet connections).
    await survivor.close({ graceMs: 0 });
    await Promise.all(sims.map((sim) => sim.close()));
    await redis.stop();
  });

  async function fleetInflight(): Promise<number> {
    const snapshot = await survivor.state.snapshot(
      'test-model',
      sims.map((_, index) => new URL(backendUrls[index] as string).host),
      [],
    );
    let total = 0;
    for (const count of snapshot.inflight.values()) total += count;
    return total;
  }

  it('heals the in-flight counts of a SIGKILLed replica within the lease TTL', async () => {
    const [port, opsPort] = (await findFreePorts(2)) as [number, number];
    const doomed = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        join(import.meta.dirname, '../src/main.ts'),
        '--host',
        '127.0.0.1',
        '--port',
        String(port),
        '--ops-port',
        String(opsPort),
        '--backends',
        backendUrls.join(','),
        '--redis-url',
        redis.url,
        '--lease-ttl-ms',
        String(LEASE_TTL_MS),
        // As the survivor's: with the default (50 ms) a Redis call slowed by a busy machine falls back to the
        // replica's local state, and a lease taken there is not in the fleet's count this test waits for.
        '--redis-timeout-ms',
        '500',
        '--log-level',
        'warn',
      ],
      { stdio: 'ignore', cwd: join(import.meta.dirname, '../../..') },
    );
    try {
      await waitFor(
        async () => (await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => null))?.status === 200,
        20_000,
      );
      const controllers = Array.from({ length: 20 }, () => new AbortController());
      const streams = controllers.map((controller, index) =>
        fetch(`http://127.0.0.1:${port}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            model: 'test-model',
            messages: [{ role: 'user', content: `long stream ${index}` }],
            max_tokens: 5000,
            stream: true,
          }),
          signal: controller.signal,
        })
          .then((response) => response.body?.getReader().read())
          .catch(() => undefined),
      );
      await Promise.all(streams);
      await waitFor(async () => (await fleetInflight()) === 20, 5_000).catch(async (error: Error) => {
        throw new Error(`${error.message}: ${await fleetInflight()} leases in Redis, 20 streams open`);
      });
      doomed.kill('SIGKILL');
      const killedAt = Date.now();
      // The survivor keeps routing while the dead replica's leases are still counted.
      const response = await fetch(`${survivorUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'test-model',
          messages: [{ role: 'user', content: 'still there?' }],
          max_tokens: 2,
        }),
      });
      expect(response.status).toBe(200);
      await waitFor(async () => (await fleetInflight()) === 0, LEASE_TTL_MS + 3_000);
      expect(Date.now() - killedAt).toBeLessThanOrEqual(LEASE_TTL_MS + 1_500);
      for (const controller of controllers) controller.abort();
    } finally {
      doomed.kill('SIGKILL');
    }
  }, 60_000);
});
