import { createRedis } from '@kvroute/redis-store';
import { Queue } from 'bullmq';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { SCRAPE_QUEUE_NAME } from '../src/create-poller';
import { catchUpJobId } from '../src/schedule-scrapes';
import type { ScrapeJobData } from '../src/scrape-job';
import { openTestEnv, startSim, waitForValue, type TestEnv, type TestSim } from './poller-test-kit';

/**
 * A poller killed in the one round trip between taking a scrape job and planning the scheduler's next
 * one leaves that scheduler with no future job (and its taken job locked for `jobLockMs`). The SIGKILL
 * test in replicas.test.ts lands in that window only by chance; this one makes the state on purpose,
 * under two running replicas: right after a scrape, the scheduler's planned job is deleted, as if a
 * worker had taken it and died.
 */
const INTERVAL_MS = 300;
// Locks, stalled checks and reconciles far beyond the test: only the stuck check can repair.
const POLLER = {
  intervalMs: INTERVAL_MS,
  scrapeTimeoutMs: 200,
  jobLockMs: 20_000,
  stalledCheckMs: 20_000,
  reconcileMs: 20_000,
};

let env: TestEnv;
let sim: TestSim | null = null;
beforeAll(async () => {
  env = await openTestEnv();
});
beforeEach((context) => env.beginTest(context.task.name.slice(0, 20)));
afterEach(async () => {
  await env.closePollers();
  await sim?.sim.close();
  sim = null;
});
afterAll(() => env.close());

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

describe('health poller: a scheduler left without a next job', () => {
  it('is re-planned within half an interval and its lost slot scraped once, by two replicas', async () => {
    const backend = await startSim();
    sim = backend;
    await Promise.all([0, 1].map(() => env.startPoller({ ...POLLER, backends: [backend.url] })));
    await waitForValue(
      async () => backend.metricsScrapes.length,
      (count) => count >= 3,
      5000,
    );

    const connection = createRedis(env.redis.url, 'worker');
    const queue = new Queue<ScrapeJobData>(SCRAPE_QUEUE_NAME, { connection, prefix: `${env.namespace}:{poller}` });
    try {
      // Just after a scrape, the next job is planned about an interval ahead: delete it (BullMQ refuses
      // to remove a scheduler's job, so as its scripts would).
      const seen = backend.metricsScrapes.length;
      await waitForValue(
        async () => backend.metricsScrapes.length,
        (count) => count > seen,
        2000,
      );
      const [scheduler] = await queue.getJobSchedulers();
      const slotMs = scheduler?.next as number;
      const plannedJobId = `repeat:${backend.id}:${slotMs}`;
      expect(await queue.getJobState(plannedJobId)).toBe('delayed');
      await connection.zrem(queue.keys['delayed'] as string, plannedJobId);
      await connection.del(queue.toKey(plannedJobId));
      const lastScrapeMs = backend.metricsScrapes.at(-1) as number;

      // Six slots follow the deleted one within 6.5 intervals of the last scrape (the scheduler is fixed-rate,
      // anchored on its slots); the window ends half an interval from any slot, so a scrape a little early or
      // late does not change the count (a sleep of exactly 6 intervals ended on the sixth slot, and the count
      // depended on which came first on a busy CI machine).
      const windowEndMs = lastScrapeMs + 6.5 * INTERVAL_MS;
      await sleep(windowEndMs - Date.now() + 50);
      const after = backend.metricsScrapes.filter((time) => time >= lastScrapeMs && time <= windowEndMs);
      const gaps = after.slice(1).map((time, i) => time - (after[i] as number));
      console.info(
        `[health-poller] stuck scheduler (slot ${slotMs - lastScrapeMs} ms after the last scrape deleted): gaps since ${gaps.join(', ')} ms`,
      );
      // The lost slot: found a quarter interval late (checked every quarter interval), scraped at once
      // by a catch-up job, then the re-planned slot an interval after the lost one. Gaps of about 1.3
      // and 0.7 intervals, then one interval (measured: 379–415, 185–222, then 290–311 ms). The bound
      // is the acceptance's, two intervals (without the repair: the 20 s job lock).
      expect(gaps[0]).toBeLessThanOrEqual(2 * INTERVAL_MS);
      expect(Math.max(...gaps)).toBeLessThanOrEqual(2 * INTERVAL_MS);
      // The two replicas both find the stuck scheduler; the catch-up job's id comes from the slot, so it
      // runs once: never two scrapes close together.
      expect(Math.min(...gaps)).toBeGreaterThanOrEqual(INTERVAL_MS / 3);
      expect(await queue.getJobState(catchUpJobId(backend.id, slotMs))).toBe('completed');
      expect(after.length - 1).toBeGreaterThanOrEqual(6);
      expect(after.length - 1).toBeLessThanOrEqual(7);
    } finally {
      await queue.close();
      connection.disconnect();
    }
  });
});
