import { describe, expect, it } from 'vitest';
import type { AdmitRequest } from '@kvroute/redis-store';
import { LimitGate } from './limit-gate';
import { durationText, rateLimitHeaders } from '../pipeline/limit';

const silentLogger = { warn: () => undefined, debug: () => undefined, info: () => undefined };
const silent = silentLogger as never;
const request = (nowMs: number, leaseId: string, extra: Partial<AdmitRequest> = {}): AdmitRequest => ({
  tenant: 't',
  keyId: 'k',
  leaseId,
  nowMs,
  leaseTtlMs: 60_000,
  rates: [{ scope: 'key', unit: 'requests', limit: 60, periodMs: 60_000 }],
  reservedTokens: 10,
  ...extra,
});

describe('LimitGate', () => {
  it('enforces the whole limit in memory without Redis: a burst of the limit, then one per period ÷ limit', async () => {
    const gate = new LimitGate({
      shared: null,
      liveReplicas: () => 3,
      retryAfterMs: 500,
      clockMs: () => 0,
      logger: silent,
    });
    let admitted = 0;
    for (let index = 0; index < 70; index++) if ((await gate.admit(request(1_000, `l${index}`))).admitted) admitted++;
    expect(admitted).toBe(60);
    const refused = await gate.admit(request(1_000, 'late'));
    expect(refused).toMatchObject({ admitted: false, retryAfterMs: 1_000 });
    expect((await gate.admit(request(2_000, 'next'))).admitted).toBe(true);
  });

  it("falls back to this replica's share (limit ÷ live replicas) when Redis fails, and says so once", async () => {
    const warnings: string[] = [];
    let calls = 0;
    const failing = {
      admit: async () => {
        calls++;
        throw new Error('connection refused');
      },
      release: async () => 0,
      renew: async () => 0,
    };
    let clock = 0;
    const gate = new LimitGate({
      shared: failing,
      liveReplicas: () => 3,
      retryAfterMs: 500,
      clockMs: () => clock,
      logger: { ...silentLogger, warn: (...args: unknown[]) => warnings.push(String(args.at(-1))) } as never,
    });
    let admitted = 0;
    for (let index = 0; index < 40; index++) {
      const outcome = await gate.admit(request(1_000, `l${index}`));
      if (outcome.admitted) admitted++;
      expect(outcome.share).toBe(3);
    }
    expect(admitted).toBe(20);
    expect(calls).toBe(1); // Redis is not asked again before retryAfterMs
    expect(gate.degraded).toBe(true);
    expect(warnings).toHaveLength(1);
    clock = 600;
    await gate.admit(request(1_000, 'again'));
    expect(calls).toBe(2);
  });

  it('settles in Redis only what holds something: tokens or concurrency, not requests-only limits', async () => {
    const released: string[] = [];
    const shared = {
      admit: async (request: AdmitRequest) => ({
        admitted: true as const,
        rates: request.rates.map((limit) => ({ limit, remaining: 1, resetMs: 0 })),
      }),
      release: async (request: { readonly leaseId: string }) => (released.push(request.leaseId), 1),
      renew: async () => 0,
    };
    const gate = new LimitGate({ shared, liveReplicas: () => 1, retryAfterMs: 500, clockMs: () => 0, logger: silent });
    const requestsOnly = await gate.admit(request(1_000, 'requests-only'));
    const withTokens = await gate.admit(
      request(1_000, 'tokens', { rates: [{ scope: 'tenant', unit: 'tokens', limit: 100, periodMs: 60_000 }] }),
    );
    const capped = await gate.admit(request(1_000, 'capped', { rates: [], concurrency: { tenant: 5 } }));
    for (const outcome of [requestsOnly, withTokens, capped]) await gate.release(outcome.ticket!, 10, 2_000);
    expect(released).toEqual(['tokens', 'capped']);
  });

  it('settles tokens where they were reserved: a refund makes room again', async () => {
    const gate = new LimitGate({
      shared: null,
      liveReplicas: () => 1,
      retryAfterMs: 500,
      clockMs: () => 0,
      logger: silent,
    });
    const tokens = (leaseId: string) =>
      request(1_000, leaseId, {
        rates: [{ scope: 'tenant', unit: 'tokens', limit: 100, periodMs: 60_000 }],
        reservedTokens: 100,
      });
    const first = await gate.admit(tokens('a'));
    expect(first.admitted).toBe(true);
    expect((await gate.admit(tokens('b'))).admitted).toBe(false);
    await gate.release(first.ticket!, 10, 1_000);
    expect((await gate.admit({ ...tokens('c'), reservedTokens: 90 })).admitted).toBe(true);
  });

  it('caps requests in flight and frees the slot at release', async () => {
    const gate = new LimitGate({
      shared: null,
      liveReplicas: () => 1,
      retryAfterMs: 500,
      clockMs: () => 0,
      logger: silent,
    });
    const capped = (leaseId: string) => request(1_000, leaseId, { rates: [], concurrency: { key: 2 } });
    const one = await gate.admit(capped('a'));
    await gate.admit(capped('b'));
    const third = await gate.admit(capped('c'));
    expect(third).toMatchObject({ admitted: false, refusedBy: { kind: 'concurrency', scope: 'key' } });
    await gate.release(one.ticket!, 0, 1_000);
    expect((await gate.admit(capped('d'))).admitted).toBe(true);
  });
});

describe('x-ratelimit headers', () => {
  it('show the tightest limit of each unit, with OpenAI-style durations', () => {
    const headers = rateLimitHeaders([
      { limit: { scope: 'tenant', unit: 'requests', limit: 600, periodMs: 60_000 }, remaining: 500, resetMs: 10_000 },
      { limit: { scope: 'key', unit: 'requests', limit: 60, periodMs: 60_000 }, remaining: 3, resetMs: 57_000 },
      { limit: { scope: 'key', unit: 'tokens', limit: 10_000, periodMs: 60_000 }, remaining: 9_000, resetMs: 6_000 },
    ]);
    expect(headers).toEqual({
      'x-ratelimit-limit-requests': '60',
      'x-ratelimit-remaining-requests': '3',
      'x-ratelimit-reset-requests': '57s',
      'x-ratelimit-limit-tokens': '10000',
      'x-ratelimit-remaining-tokens': '9000',
      'x-ratelimit-reset-tokens': '6s',
    });
    expect([durationText(120), durationText(1_500), durationText(360_000), durationText(61_250)]).toEqual([
      '120ms',
      '1.5s',
      '6m0s',
      '1m1.25s',
    ]);
  });
});
