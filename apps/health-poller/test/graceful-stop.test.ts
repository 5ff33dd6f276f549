import { spawn } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import { join } from 'node:path';
import { Queue } from 'bullmq';
import { createRedis } from '@kvroute/redis-store';
import { findFreePort } from '@kvroute/testing';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { SCRAPE_QUEUE_NAME } from '../src/create-poller';
import type { ScrapeJobResult } from '../src/scrape-job';
import { openTestEnv, startSim, type TestEnv, type TestSim } from './poller-test-kit';

/**
 * A poller replica asked to stop (SIGTERM → `close`) while a scrape runs: /healthz turns 503 at once,
 * the scrape finishes and publishes, then the worker, queue, HTTP server and client and every Redis
 * connection close, and nothing more is scraped. The job schedulers stay in Redis: they are the
 * fleet's, and the other replicas go on taking their jobs.
 */
const INTERVAL_MS = 1_000;
/** The backend's /metrics answers this late, so that `close` lands in the middle of a scrape. */
const METRICS_DELAY_MS = 600;
const POLLER = {
  intervalMs: INTERVAL_MS,
  scrapeTimeoutMs: 900,
  jobLockMs: 3_000,
  stalledCheckMs: 3_000,
  reconcileMs: 1_000,
  backendSetPollMs: 200,
};

let env: TestEnv;
let sim: TestSim;
let slow: { server: Server; url: string; metricsStarts: number[] };

beforeAll(async () => {
  env = await openTestEnv();
  sim = await startSim();
  slow = await startSlowFront(sim.url);
});
beforeEach((context) => env.beginTest(context.task.name.slice(0, 20)));
afterEach(() => env.closePollers());
afterAll(async () => {
  await new Promise((resolve) => slow.server.close(resolve));
  await sim.sim.close();
  await env.close();
});

describe('poller graceful stop', () => {
  it('finishes the scrape under way, then closes the worker, queue and Redis connections, and scrapes no more', async () => {
    const events: string[] = [];
    const jobs: ScrapeJobResult[] = [];
    const poller = await env.startPoller(
      { ...POLLER, backends: [slow.url] },
      {
        onJob: (_backend, result) => {
          jobs.push(result);
          events.push(`job ${result.kind}`);
        },
      },
    );
    // Wait for a scrape to be under way: its /metrics request has reached the backend, not answered yet.
    const deadline = Date.now() + 10_000;
    while (slow.metricsStarts.length < 2 && Date.now() < deadline)
      await new Promise((resolve) => setTimeout(resolve, 5));
    expect(slow.metricsStarts.length).toBeGreaterThanOrEqual(2);
    const jobsBefore = jobs.length;
    expect(String(await env.client.client('LIST'))).toMatch(/name=kvroute-poller/);

    const closing = poller.close();
    events.push('close started');
    expect((await poller.app.inject({ method: 'GET', url: '/healthz' })).statusCode).toBe(503);
    const result = await closing;
    events.push('closed');

    expect(result.ok).toBe(true);
    expect(result.closed).toEqual([
      'kv-events',
      'reconcile',
      'backend-set-watch',
      'worker',
      'queue',
      'http-server',
      'http-client',
      'kv-events-redis',
      'bullmq-redis',
      'redis-subscriber',
      'redis',
    ]);
    // The scrape under way ran to its end (and published) before the worker closed.
    expect(jobs.length).toBe(jobsBefore + 1);
    expect(jobs.at(-1)?.kind).toBe('scraped');
    expect(events.slice(-3)).toEqual(['close started', 'job scraped', 'closed']);
    expect(await env.store.read(new URL(slow.url).host)).toMatchObject({ healthy: true });

    // Nothing of this replica is left connected to Redis.
    const clients = String(await env.client.client('LIST'));
    expect(clients).not.toMatch(/name=kvroute-poller/);
    // No more scrapes from it.
    const scrapesAtClose = slow.metricsStarts.length;
    await new Promise((resolve) => setTimeout(resolve, 2 * INTERVAL_MS));
    expect(slow.metricsStarts.length).toBe(scrapesAtClose);
    // The fleet's job scheduler for the backend is still there for the other replicas.
    const queue = new Queue(SCRAPE_QUEUE_NAME, {
      connection: createRedis(env.redis.url, 'worker'),
      prefix: `${env.namespace}:{poller}`,
    });
    try {
      expect((await queue.getJobSchedulers()).map((scheduler) => scheduler.key)).toEqual([new URL(slow.url).host]);
    } finally {
      await queue.close();
      await queue.disconnect();
    }
  });

  it('on SIGTERM, a poller process finishes its scrape, disconnects from Redis and exits 0', {
    timeout: 60_000,
  }, async () => {
    const port = await findFreePort();
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        join(import.meta.dirname, '../src/main.ts'),
        '--host',
        '127.0.0.1',
        '--port',
        String(port),
        '--redis-url',
        env.redis.url,
        '--backends',
        slow.url,
        '--interval-ms',
        String(INTERVAL_MS),
        '--scrape-timeout-ms',
        '900',
        '--job-lock-ms',
        '3000',
        '--log-level',
        'warn',
      ],
      { stdio: 'ignore', cwd: join(import.meta.dirname, '../../..') },
    );
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    try {
      const deadline = Date.now() + 40_000;
      while ((await fetch(`http://127.0.0.1:${port}/healthz`).catch(() => null))?.status !== 200) {
        if (Date.now() > deadline) throw new Error('the poller process did not become healthy');
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      // Signal in the middle of a scrape.
      const scrapes = slow.metricsStarts.length;
      while (slow.metricsStarts.length === scrapes) await new Promise((resolve) => setTimeout(resolve, 5));
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
      expect(String(await env.client.client('LIST'))).not.toMatch(/name=kvroute-poller/);
    } finally {
      child.kill('SIGKILL');
    }
  });
});

/** A front for `target` whose /metrics answers METRICS_DELAY_MS late (everything else at once), noting when each /metrics request arrived. */
async function startSlowFront(target: string): Promise<{ server: Server; url: string; metricsStarts: number[] }> {
  const metricsStarts: number[] = [];
  const server = createServer((request, response) => {
    const isMetrics = request.url === '/metrics';
    if (isMetrics) metricsStarts.push(Date.now());
    setTimeout(
      () => {
        fetch(`${target}${request.url ?? '/'}`)
          .then(async (answer) => {
            response.writeHead(answer.status, { 'content-type': answer.headers.get('content-type') ?? 'text/plain' });
            response.end(await answer.text());
          })
          .catch(() => response.destroy());
      },
      isMetrics ? METRICS_DELAY_MS : 0,
    );
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { server, url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, metricsStarts };
}
