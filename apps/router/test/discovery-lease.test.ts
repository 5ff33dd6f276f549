import { createRedis, waitUntilReady, type RedisClient } from '@kvroute/redis-store';
import { startRedis, uniqueKeyPrefix, type TestRedis } from '@kvroute/testing';
import type { FastifyBaseLogger } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LocalBackendChanges } from '../src/backends/backend-changes';
import { BackendRegistry } from '../src/backends/backend-registry';
import type { BackendSource, DiscoveryAnswer } from '../src/discovery/backend-source';
import { DiscoveryApplier, type IntervalTimers } from '../src/discovery/discovery-applier';
import { RedisDiscoveryLease, SOLE_REPLICA, type DiscoveryLeadership } from '../src/discovery/discovery-leader';
import { waitFor } from './start-test-cluster';

/** One Redis for the file's two suites (each key is unique per test). */
let redis: TestRedis;
let connection: RedisClient;
beforeAll(async () => {
  redis = await startRedis();
  connection = createRedis(redis.url, 'request-path', { commandTimeoutMs: 5_000 });
  await waitUntilReady(connection);
});
afterAll(async () => {
  connection.disconnect();
  await redis.stop();
});

/** The lease that lets one replica at a time apply what discovery finds, on a real Redis. */
describe('RedisDiscoveryLease', () => {
  it('one holder at a time; renewing keeps it; release hands it over at once', async () => {
    const key = `${uniqueKeyPrefix('discovery-lease')}:lease`;
    const a = new RedisDiscoveryLease({ redis: connection, key, holder: 'a', ttlMs: 10_000 });
    const b = new RedisDiscoveryLease({ redis: connection, key, holder: 'b', ttlMs: 10_000 });
    expect(await a.holds()).toBe(true);
    expect(await b.holds()).toBe(false);
    expect(await a.holds()).toBe(true);
    // b releasing what it does not hold changes nothing.
    await b.release();
    expect(await b.holds()).toBe(false);
    await a.release();
    expect(await b.holds()).toBe(true);
    expect(await a.holds()).toBe(false);
  });

  it('a holder that stops renewing (a crashed replica) loses the lease once its TTL has passed', async () => {
    const key = `${uniqueKeyPrefix('discovery-lease')}:lease`;
    const crashed = new RedisDiscoveryLease({ redis: connection, key, holder: 'crashed', ttlMs: 300 });
    const survivor = new RedisDiscoveryLease({ redis: connection, key, holder: 'survivor', ttlMs: 300 });
    expect(await crashed.holds()).toBe(true);
    expect(await survivor.holds()).toBe(false);
    await waitFor(() => survivor.holds(), 3_000);
    expect(await connection.get(key)).toBe('survivor');
    expect(await crashed.holds()).toBe(false);
  });

  it('Redis unreachable: not held (the set cannot be changed then anyway), never a throw', async () => {
    const unreachable = createRedis('redis://127.0.0.1:1', 'request-path');
    try {
      const lease = new RedisDiscoveryLease({ redis: unreachable, key: 'kvr:test:lease', holder: 'x', ttlMs: 1_000 });
      expect(await lease.holds()).toBe(false);
      await expect(lease.release()).resolves.toBeUndefined();
    } finally {
      unreachable.disconnect();
    }
  });
});

/** A source whose answers the test hands over: the first one at start (after `gate`, if given). */
class ScriptedSource implements BackendSource {
  readonly kind = 'dns';
  readonly name = 'vllm';
  private onAnswer: ((answer: DiscoveryAnswer) => Promise<void>) | null = null;
  constructor(
    private readonly first: DiscoveryAnswer,
    private readonly gate: Promise<void> = Promise.resolve(),
  ) {}
  async start(onAnswer: (answer: DiscoveryAnswer) => Promise<void>): Promise<void> {
    await this.gate;
    this.onAnswer = onAnswer;
    await onAnswer(this.first);
  }
  async stop(): Promise<void> {
    this.onAnswer = null;
  }
  push(answer: DiscoveryAnswer): Promise<void> {
    return this.onAnswer?.(answer) ?? Promise.resolve();
  }
}

/** Log lines by message, as the applier writes them. */
function capturingLogger(): { logger: FastifyBaseLogger; lines: Array<{ level: string; message: string }> } {
  const lines: Array<{ level: string; message: string }> = [];
  const at = (level: string) => (_details: unknown, message: string) => void lines.push({ level, message });
  return {
    logger: {
      warn: at('warn'),
      info: at('info'),
      debug: at('debug'),
      error: at('error'),
    } as unknown as FastifyBaseLogger,
    lines,
  };
}

const answerOf = (...ports: number[]): DiscoveryAnswer => ({
  kind: 'backends',
  backends: ports.map((port) => ({ id: `vllm@127.0.0.1:${port}`, url: `http://127.0.0.1:${port}`, draining: false })),
  dropped: 0,
});

function replica(
  source: BackendSource,
  leadership: DiscoveryLeadership,
  options: { reapplyMs: number; staleAfterMs: number; intervals?: IntervalTimers },
) {
  const registry = new BackendRegistry([], {
    breakerFailureThreshold: 3,
    breakerCooldownMs: 1_000,
    nowMs: () => performance.now(),
    fetchModels: async () => ['m'],
  });
  const log = capturingLogger();
  // What the applier last said through onLeadership (the metric's value).
  const said = { leading: false };
  const applier = new DiscoveryApplier({
    source,
    changes: new LocalBackendChanges(registry),
    registry,
    leadership,
    admitUrl: async () => ({ allowed: true }),
    removeAfterMs: 60_000,
    reapplyMs: options.reapplyMs,
    staleAfterMs: options.staleAfterMs,
    nowMs: () => performance.now(),
    ...(options.intervals ? { intervals: options.intervals } : {}),
    onFailure: () => undefined,
    onLeadership: (leading) => {
      said.leading = leading;
    },
    logger: log.logger,
  });
  return { registry, applier, lines: log.lines, says: said };
}

describe('DiscoveryApplier leadership', () => {
  it('a leader whose source keeps failing stops renewing the lease: a replica whose source answers takes over; the failure is logged once', async () => {
    const key = `${uniqueKeyPrefix('discovery-lease')}:lease`;
    const ttlMs = 300;
    const timing = { reapplyMs: 40, staleAfterMs: ttlMs };
    const sourceA = new ScriptedSource(answerOf(9001));
    const sourceB = new ScriptedSource(answerOf(9001));
    const a = replica(sourceA, new RedisDiscoveryLease({ redis: connection, key, holder: 'a', ttlMs }), timing);
    const b = replica(sourceB, new RedisDiscoveryLease({ redis: connection, key, holder: 'b', ttlMs }), timing);
    try {
      await a.applier.start();
      await b.applier.start();
      expect(await connection.get(key)).toBe('a');
      expect([a.says.leading, b.says.leading]).toEqual([true, false]);
      expect(a.registry.backends.map((backend) => backend.id)).toEqual(['vllm@127.0.0.1:9001']);
      // A's source fails (again and again); B's answers, with a new backend.
      await sourceA.push({ kind: 'failed', error: new Error('SERVFAIL') });
      await sourceB.push(answerOf(9001, 9002));
      // While the failure is recent A still leads (a brief failure hands nothing over)…
      expect(await connection.get(key)).toBe('a');
      const failing = setInterval(() => void sourceA.push({ kind: 'failed', error: new Error('SERVFAIL') }), 25);
      try {
        // …then its lease lapses and B, re-applying its answer, takes it and applies it.
        await waitFor(async () => (await connection.get(key)) === 'b', 5_000);
        await waitFor(() => b.registry.get('vllm@127.0.0.1:9002') !== undefined, 2_000);
        expect([a.says.leading, b.says.leading]).toEqual([false, true]);
        // Many reapply periods later, A has not taken it back.
        await new Promise((resolve) => setTimeout(resolve, 6 * timing.reapplyMs));
        expect(await connection.get(key)).toBe('b');
      } finally {
        clearInterval(failing);
      }
      const messages = (level: string, text: string) =>
        a.lines.filter((line) => line.level === level && line.message.includes(text)).length;
      // One warning for the whole run of failures (re-applying the last answer is no answer from the source), no "answers again".
      expect(messages('warn', 'could not be read')).toBe(1);
      expect(messages('warn', 'failed for too long')).toBe(1);
      expect(messages('info', 'answers again')).toBe(0);
      // Its source answers again: said once, and it re-applies (taking the lease when B's lapses).
      await sourceA.push(answerOf(9001));
      expect(messages('info', 'answers again')).toBe(1);
      await b.applier.stop();
      expect(b.says.leading).toBe(false);
      await waitFor(async () => (await connection.get(key)) === 'a', 5_000);
      await waitFor(() => a.says.leading, 2_000);
    } finally {
      await a.applier.stop();
      await b.applier.stop();
    }
  });

  it('stop() while the source is starting: no re-apply interval is left running', async () => {
    let open: () => void = () => undefined;
    const gate = new Promise<void>((resolve) => {
      open = resolve;
    });
    const installed: unknown[] = [];
    const intervals: IntervalTimers = {
      every: (run, periodMs) => {
        const handle = setInterval(run, periodMs);
        installed.push(handle);
        return handle;
      },
      cancel: (handle) => clearInterval(handle as NodeJS.Timeout),
    };
    const { applier, registry } = replica(new ScriptedSource(answerOf(9001), gate), SOLE_REPLICA, {
      reapplyMs: 20,
      staleAfterMs: 1_000,
      intervals,
    });
    const starting = applier.start();
    await applier.stop();
    open();
    await starting;
    expect(installed).toEqual([]);
    // Nothing was applied after stop either.
    expect(registry.backends).toEqual([]);
  });
});
