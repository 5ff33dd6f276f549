import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { tenantKeys } from '../../src/keys';
import { TenantLimits, type AdmitRequest, type RateLimit } from '../../src/tenant-limits';
import { openRedisTestContext, type RedisTestContext } from './redis-test-context';

let ctx: RedisTestContext;
beforeAll(async () => {
  ctx = await openRedisTestContext({ label: 'redis-store-tenant-limits' });
});
beforeEach(() => ctx.beginTest('tenant-limits'));
afterEach(() => ctx.cleanup());
afterAll(() => ctx.close());

const MINUTE = 60_000;
const REQUESTS_600: RateLimit = { scope: 'key', unit: 'requests', limit: 600, periodMs: MINUTE };
const TOKENS_10K: RateLimit = { scope: 'tenant', unit: 'tokens', limit: 10_000, periodMs: MINUTE };
const T0 = 1_800_000_000_000;

let leaseCounter = 0;
function request(overrides: Partial<AdmitRequest> = {}): AdmitRequest {
  leaseCounter += 1;
  return {
    tenant: 'acme',
    keyId: 'k1',
    leaseId: `lease-${leaseCounter}`,
    nowMs: T0,
    leaseTtlMs: 30_000,
    rates: [REQUESTS_600],
    reservedTokens: 100,
    ...overrides,
  };
}

describe('admit-tenant.lua / settle-tenant.lua: limits that hold across replicas', () => {
  it('admits a burst of exactly the limit, then one more every period / limit (GCRA)', async () => {
    const limits = new TenantLimits({ redis: ctx.redis, keyNamespace: ctx.namespace, clock: 'caller' });
    let admitted = 0;
    for (let i = 0; i < 650; i++) if ((await limits.admit(request())).admitted) admitted += 1;
    expect(admitted).toBe(600);
    const refused = await limits.admit(request());
    // The next unit is due 100 ms (60 000 / 600) after the burst's first.
    expect(refused).toMatchObject({
      admitted: false,
      retryAfterMs: 100,
      refusedBy: { kind: 'rate', limit: REQUESTS_600 },
    });
    expect((await limits.admit(request({ nowMs: T0 + 99 }))).admitted).toBe(false);
    expect((await limits.admit(request({ nowMs: T0 + 100 }))).admitted).toBe(true);
    expect((await limits.admit(request({ nowMs: T0 + 100 }))).admitted).toBe(false);
  });

  it('is exact under concurrent admissions from several connections (three router replicas)', async () => {
    const replicas = await Promise.all([ctx.connect(), ctx.connect(), ctx.connect()]).then((clients) =>
      clients.map((redis) => new TenantLimits({ redis, keyNamespace: ctx.namespace, clock: 'caller' })),
    );
    const outcomes = await Promise.all(
      Array.from({ length: 900 }, (_, i) => (replicas[i % 3] as TenantLimits).admit(request())),
    );
    expect(outcomes.filter((outcome) => outcome.admitted)).toHaveLength(600);
  });

  it('takes nothing from any limit when one of them refuses', async () => {
    const limits = new TenantLimits({ redis: ctx.redis, keyNamespace: ctx.namespace, clock: 'caller' });
    const both = [REQUESTS_600, TOKENS_10K];
    expect((await limits.admit(request({ rates: both, reservedTokens: 9_000 }))).admitted).toBe(true);
    const refused = await limits.admit(request({ rates: both, reservedTokens: 2_000 }));
    expect(refused).toMatchObject({ admitted: false, refusedBy: { kind: 'rate', limit: TOKENS_10K } });
    // The refused request took no request unit: 599 remain after the first, as before the refusal.
    const next = await limits.admit(request({ rates: both, reservedTokens: 1_000 }));
    expect(next.admitted).toBe(true);
    expect(next.rates.map((rate) => rate.remaining)).toEqual([598, 0]);
  });

  it('refuses for good a request that alone exceeds a limit', async () => {
    const limits = new TenantLimits({ redis: ctx.redis, keyNamespace: ctx.namespace, clock: 'caller' });
    expect(await limits.admit(request({ rates: [TOKENS_10K], reservedTokens: 10_001 }))).toMatchObject({
      admitted: false,
      retryAfterMs: null,
    });
    expect((await limits.admit(request({ rates: [TOKENS_10K], reservedTokens: 10_000 }))).admitted).toBe(true);
  });

  it('settles tokens from usage: an unused reservation comes back, an overdraft is paid by the next requests', async () => {
    const limits = new TenantLimits({ redis: ctx.redis, keyNamespace: ctx.namespace, clock: 'caller' });
    const first = request({ rates: [TOKENS_10K], reservedTokens: 8_000 });
    expect((await limits.admit(first)).admitted).toBe(true);
    expect((await limits.admit(request({ rates: [TOKENS_10K], reservedTokens: 5_000 }))).admitted).toBe(false);
    await limits.release({ ...first, usedTokens: 3_000 }); // 5 000 of the 8 000 reserved come back
    const after = await limits.admit(request({ rates: [TOKENS_10K], reservedTokens: 5_000 }));
    expect(after).toMatchObject({ admitted: true, rates: [{ remaining: 2_000 }] });
    const over = request({ rates: [TOKENS_10K], reservedTokens: 1_000 });
    await limits.admit(over);
    await limits.release({ ...over, usedTokens: 2_000 }); // 1 000 more than reserved: the bucket is full now
    expect((await limits.admit(request({ rates: [TOKENS_10K], reservedTokens: 1 }))).admitted).toBe(false);
  });

  it('caps requests in flight per tenant and per key, and a crashed holder leaks nothing', async () => {
    const limits = new TenantLimits({ redis: ctx.redis, keyNamespace: ctx.namespace, clock: 'caller' });
    const capped = { rates: [], concurrency: { tenant: 3, key: 2 } };
    const a = request({ ...capped });
    const b = request({ ...capped });
    expect((await limits.admit(a)).admitted && (await limits.admit(b)).admitted).toBe(true);
    expect(await limits.admit(request({ ...capped }))).toMatchObject({
      admitted: false,
      refusedBy: { kind: 'concurrency', scope: 'key' },
    });
    expect((await limits.admit(request({ ...capped, keyId: 'k2' }))).admitted).toBe(true);
    expect(await limits.admit(request({ ...capped, keyId: 'k3' }))).toMatchObject({
      admitted: false,
      refusedBy: { kind: 'concurrency', scope: 'tenant' },
    });
    expect(await limits.release({ ...a, usedTokens: 0 })).toBe(2);
    expect((await limits.admit(request({ ...capped }))).admitted).toBe(true);
    // b's replica died: its leases expire and stop counting, renewing them fails.
    const later = T0 + 30_001;
    expect(await limits.renew({ ...b, nowMs: later })).toBe(0);
    expect((await limits.admit(request({ ...capped, keyId: 'k3', nowMs: later }))).admitted).toBe(true);
  });

  it('admits a full burst when period / limit is not exact in binary (9 and 14 per minute at a real clock)', async () => {
    // At these clocks, adding 60 000 / L L times ends a rounding error past 60 000 ms for L = 9 and 14
    // (checked in doubles, as Lua computes): without the script's EPSILON_MS the last unit is refused.
    const limits = new TenantLimits({ redis: ctx.redis, keyNamespace: ctx.namespace, clock: 'caller' });
    for (const limit of [9, 14]) {
      const rate: RateLimit = { scope: 'tenant', unit: 'requests', limit, periodMs: MINUTE };
      for (const nowMs of [T0 + 1, T0 + 123_456_789]) {
        const outcomes = [];
        for (let i = 0; i <= limit; i++)
          outcomes.push((await limits.admit(request({ tenant: `t${limit}-${nowMs}`, rates: [rate], nowMs }))).admitted);
        expect(outcomes).toEqual([...Array.from({ length: limit }, () => true), false]);
      }
    }
  });

  it('keeps a renewed lease past twice its TTL, and a settled debt past the expiry its admission set', async () => {
    const limits = new TenantLimits({ redis: ctx.redis, keyNamespace: ctx.namespace, clock: 'caller' });
    const keys = tenantKeys('acme', ctx.namespace);
    // A long stream: 1 in flight allowed, lease TTL 1 s, renewed every 500 ms for 3 s.
    const stream = request({ rates: [], leaseTtlMs: 1_000, concurrency: { key: 1 } });
    expect((await limits.admit(stream)).admitted).toBe(true);
    for (let t = 500; t <= 3_000; t += 500) expect(await limits.renew({ ...stream, nowMs: T0 + t })).toBe(1);
    // Redis expires keys on its own clock, which this test does not move: a renewal with a longer TTL
    // shows that renewing lengthens the set's expiry (admission set 2 × 1 s).
    expect(await limits.renew({ ...stream, nowMs: T0 + 3_500, leaseTtlMs: 20_000 })).toBe(1);
    expect(await ctx.redis.pttl(keys.keyLeases('k1'))).toBeGreaterThan(30_000);
    // Ten requests reserve 10 tokens each of 1 000/min and use 1 000 each: the bucket owes ~10 minutes.
    const small: RateLimit = { scope: 'tenant', unit: 'tokens', limit: 1_000, periodMs: MINUTE };
    const admitted = [];
    for (let i = 0; i < 10; i++) admitted.push(request({ rates: [small], reservedTokens: 10 }));
    for (const one of admitted) expect((await limits.admit(one)).admitted).toBe(true);
    for (const one of admitted) await limits.release({ ...one, usedTokens: 1_000 });
    expect(await ctx.redis.pttl(keys.rates)).toBeGreaterThan(9 * MINUTE);
    expect(await limits.admit(request({ rates: [small], reservedTokens: 1, nowMs: T0 + 5 * MINUTE }))).toMatchObject({
      admitted: false,
    });
  });

  it('refuses counts that would break the script or give credit, before calling Redis', async () => {
    const limits = new TenantLimits({ redis: ctx.redis, keyNamespace: ctx.namespace, clock: 'caller' });
    await expect(limits.admit(request({ rates: [TOKENS_10K], reservedTokens: Number.NaN }))).rejects.toThrow(
      RangeError,
    );
    await expect(limits.admit(request({ rates: [{ ...TOKENS_10K, limit: 0.5 }] }))).rejects.toThrow(RangeError);
    await expect(limits.release({ ...request({ rates: [TOKENS_10K] }), usedTokens: -5 })).rejects.toThrow(RangeError);
  });

  it("keeps a tenant's keys on one hash tag, apart from pools and other tenants", () => {
    const acme = tenantKeys('acme', 'ns');
    expect([acme.rates, acme.tenantLeases, acme.keyLeases('k1')]).toEqual([
      'ns:{tenant:acme}:rates',
      'ns:{tenant:acme}:leases:tenant',
      'ns:{tenant:acme}:leases:key:k1',
    ]);
    expect(tenantKeys('a}b', 'ns').rates).toMatch(/^ns:\{tenant:[0-9a-f]{40}\}:rates$/);
  });

  it('counts by Redis TIME: two replicas whose clocks disagree by minutes share one timeline (issue 30)', async () => {
    // Replica B's clock runs 5 minutes ahead of A's. By its own clock every bucket A filled would be full
    // again and every lease A holds long expired: a second burst would pass, and the caps with it.
    const [a, b] = await Promise.all([ctx.connect(), ctx.connect()]).then((clients) =>
      clients.map((redis) => new TenantLimits({ redis, keyNamespace: ctx.namespace })),
    );
    const ten: RateLimit = { scope: 'tenant', unit: 'requests', limit: 10, periodMs: MINUTE };
    const onA = () => request({ tenant: 'skew', rates: [ten], nowMs: Date.now() });
    const onB = () => request({ tenant: 'skew', rates: [ten], nowMs: Date.now() + 5 * MINUTE });
    let admitted = 0;
    for (let i = 0; i < 10; i++) if ((await (a as TenantLimits).admit(onA())).admitted) admitted += 1;
    for (let i = 0; i < 10; i++) if ((await (b as TenantLimits).admit(onB())).admitted) admitted += 1;
    expect(admitted).toBe(10);
    const refused = await (b as TenantLimits).admit(onB());
    expect(refused).toMatchObject({ admitted: false });
    // Retry-After is the real wait (~6 s for 10 a minute), not 5 minutes off.
    expect(!refused.admitted && refused.retryAfterMs).toBeLessThanOrEqual(6_000);

    const capped = (nowMs: number) =>
      request({ tenant: 'skew-cap', rates: [], concurrency: { tenant: 2 }, leaseTtlMs: 30_000, nowMs });
    expect((await (a as TenantLimits).admit(capped(Date.now()))).admitted).toBe(true);
    expect((await (a as TenantLimits).admit(capped(Date.now()))).admitted).toBe(true);
    // A's leases live 30 s by Redis's clock: B, 5 minutes ahead, must not purge them as expired.
    expect((await (b as TenantLimits).admit(capped(Date.now() + 5 * MINUTE))).admitted).toBe(false);
  });
});
