import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { createLogger } from '@kvroute/platform';
import { findFreePort, startRedis, type TestRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PollerConfig } from '../src/config';
import { createHealthPoller, type HealthPoller } from '../src/create-poller';
import { startSim, type TestSim } from './poller-test-kit';

/** One parsed log line (the logger writes its level as a label). */
interface LogLine {
  readonly level: string;
  readonly msg: string;
  readonly text: string;
}

const WARN = 'warn';
const INFO = 'info';
const atLeastWarn = (line: LogLine): boolean => ['warn', 'error', 'fatal'].includes(line.level);

function parsed(text: string): LogLine[] {
  return text
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => {
      const record = JSON.parse(line) as { level: string; msg: string };
      return { level: record.level, msg: record.msg, text: line };
    });
}

/** Lines about Redis's state: what an operator reads to learn that it went and came back. */
const aboutRedis = (lines: readonly LogLine[]): LogLine[] => lines.filter((line) => /Redis/.test(line.msg));

/**
 * Issue 31: a poller whose Redis is down says so once per change (down, then back), without a stack
 * trace for the connection errors an outage is made of. A Redis of the test's own, killed and started
 * again on its port; a port where nothing listens for the start case.
 */
describe('the poller while Redis is down', () => {
  it('at start: one warning without a stack, then the one clear error line', async () => {
    const deadPort = await findFreePort();
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        join(import.meta.dirname, '../src/main.ts'),
        '--host',
        '127.0.0.1',
        '--port',
        '0',
        '--redis-url',
        `redis://127.0.0.1:${deadPort}`,
        '--backends',
        'http://127.0.0.1:9',
        '--log-level',
        'info',
      ],
      { stdio: ['ignore', 'pipe', 'pipe'], cwd: join(import.meta.dirname, '../../..') },
    );
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('exit', resolve));
    expect(code).toBe(1);
    const lines = parsed(stdout);
    const warnings = lines.filter(atLeastWarn);
    expect(
      warnings.map((line) => line.msg),
      stdout,
    ).toEqual([expect.stringMatching(/Redis unreachable/)]);
    expect(stdout).not.toContain('"stack"');
    expect(stdout).not.toMatch(/\n\s+at /);
    expect(stderr.trim().split('\n')).toEqual([expect.stringMatching(/^kvroute poller: Redis was not ready/)]);
  }, 40_000);

  describe('once running', () => {
    let redis: TestRedis;
    let sim: TestSim;
    let poller: HealthPoller;
    const written: string[] = [];

    beforeAll(async () => {
      redis = await startRedis({ fresh: true, logger: () => undefined });
      sim = await startSim();
      const logger = createLogger({
        service: 'kvroute-poller',
        level: 'info',
        destination: { write: (line: string) => void written.push(line) },
      });
      poller = await createHealthPoller(
        PollerConfig.parse({
          host: '127.0.0.1',
          port: 0,
          redisUrl: redis.url,
          backends: [sim.url],
          intervalMs: 300,
          scrapeTimeoutMs: 200,
          reconcileMs: 500,
          backendSetPollMs: 200,
          logLevel: 'info',
        }),
        { logger },
      );
      await poller.start();
    });
    afterAll(async () => {
      await poller?.close();
      await sim?.sim.close();
      await redis?.stop();
    });

    it('one warning when Redis goes, one line when it is back, and no stack trace', async () => {
      // A few scrapes first: the poller is under way when Redis goes.
      await new Promise((resolve) => setTimeout(resolve, 1_000));
      const cursor = written.length;
      await redis.kill();
      // Down for 4 s: many reconnect attempts, scrape intervals, reconciles and backend-set polls.
      await new Promise((resolve) => setTimeout(resolve, 4_000));
      await redis.restart();
      const deadline = Date.now() + 15_000;
      while (Date.now() < deadline && !written.slice(cursor).some((line) => /Redis reachable again/.test(line)))
        await new Promise((resolve) => setTimeout(resolve, 100));
      // Late lines (a reconnecting duplicate, a reconcile) get their chance to show.
      await new Promise((resolve) => setTimeout(resolve, 2_000));
      const lines = parsed(written.slice(cursor).join(''));
      const text = lines.map((line) => line.text).join('\n');
      expect(
        aboutRedis(lines).map((line) => [line.level, line.msg]),
        text,
      ).toEqual([
        [WARN, expect.stringMatching(/Redis unreachable/)],
        [INFO, expect.stringMatching(/Redis reachable again/)],
      ]);
      expect(
        lines.filter(atLeastWarn).map((line) => line.msg),
        text,
      ).toEqual([expect.stringMatching(/Redis unreachable/)]);
      expect(text).not.toContain('"stack"');
    }, 40_000);
  });
});
