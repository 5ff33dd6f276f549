/**
 * Tenants' limits in Redis (docs/adr/0006-tenants-keys-limits.md): requests and tokens per period, and
 * requests in flight, per tenant and per API key, exact across every router replica because each
 * admission is one script (`admit-tenant.lua`) on the tenant's slot, and each request's end is one
 * more (`settle-tenant.lua`). The router's admit stage reserves tokens (prompt estimate + max_tokens)
 * and its release stage settles them from the response's usage.
 *
 * Time is Redis's own (`TIME` in the scripts): a bucket's TAT and a lease's deadline written by one
 * replica are read by another, so one clock must say what "now" is; a replica whose clock runs ahead
 * would otherwise see every bucket full again (and admit a second burst), one running behind would see
 * them still empty. Tests that move time pass `clock: 'caller'` and the requests' `nowMs`.
 */
import { tenantKeys } from './keys';
import { RedisStoreError } from './redis-store-error';
import { runScript, SCRIPTS, type RedisClient } from './scripts';

/** Who a limit applies to: the whole tenant, or one of its keys. */
export type LimitScope = 'tenant' | 'key';
/** What a rate limit counts. */
export type RateUnit = 'requests' | 'tokens';

/** One rate limit: at most `limit` units per `periodMs`, GCRA (a burst of `limit`, then one every periodMs / limit). */
export interface RateLimit {
  readonly scope: LimitScope;
  readonly unit: RateUnit;
  /** Units per period, > 0. */
  readonly limit: number;
  /** The period, ms (> 0): 60 000 for per-minute limits. */
  readonly periodMs: number;
}

export interface AdmitRequest {
  readonly tenant: string;
  readonly keyId: string;
  /** Unique per request: the concurrency leases are held under it until `release`. */
  readonly leaseId: string;
  /** The caller's wall clock, ms: what the local limits (and `clock: 'caller'`) count by; Redis uses its own TIME. */
  readonly nowMs: number;
  /** How long a concurrency lease lives without `renew`, ms (> 0). */
  readonly leaseTtlMs: number;
  readonly rates: readonly RateLimit[];
  /** Tokens reserved for this request (prompt estimate + max_tokens): the units of its `tokens` limits. */
  readonly reservedTokens: number;
  /** Requests in flight allowed for the tenant and for the key (0 or absent = no cap). */
  readonly concurrency?: { readonly tenant?: number; readonly key?: number };
}

/** A rate limit's state after an admission: for the `x-ratelimit-*` response headers. */
export interface RateState {
  readonly limit: RateLimit;
  /** Units that could still be taken now (rounded down). */
  readonly remaining: number;
  /** Until the bucket is full again, ms (rounded up). */
  readonly resetMs: number;
}

export type AdmitOutcome =
  | { readonly admitted: true; readonly rates: readonly RateState[] }
  | {
      readonly admitted: false;
      /** When to try again, ms; null = never (the request alone exceeds a limit). */
      readonly retryAfterMs: number | null;
      /** The first limit that refused it. */
      readonly refusedBy:
        | { readonly kind: 'rate'; readonly limit: RateLimit }
        | { readonly kind: 'concurrency'; readonly scope: LimitScope };
      readonly rates: readonly RateState[];
    };

/** The hash field of a rate bucket: scope and unit, the key's id for key scopes. */
function bucketField(limit: RateLimit, keyId: string): string {
  return `${limit.scope === 'key' ? `key:${keyId}` : 'tenant'}:${limit.unit}:${limit.periodMs}`;
}

function checkLimit(limit: RateLimit): void {
  if (!Number.isInteger(limit.limit) || limit.limit < 1 || !Number.isInteger(limit.periodMs) || limit.periodMs < 1) {
    throw new RangeError(
      `a rate limit needs a whole limit ≥ 1 per a whole periodMs ≥ 1, got ${limit.limit} per ${limit.periodMs} ms`,
    );
  }
}

/** Token counts and times reach Lua as numbers: NaN would fail the script, a negative count would give credit. */
function checkCount(name: string, value: number): void {
  if (!Number.isSafeInteger(value) || value < 0)
    throw new RangeError(`${name} must be a whole number ≥ 0, got ${value}`);
}

export interface TenantLimitsOptions {
  readonly redis: RedisClient;
  /** Key namespace (keys.ts); the default `kvr:v1`. */
  readonly keyNamespace?: string;
  /**
   * Whose clock says "now": `redis` (default: Redis TIME, one clock for every replica) or `caller` (the
   * requests' `nowMs`: tests that move time only).
   */
  readonly clock?: 'redis' | 'caller';
}

export class TenantLimits {
  readonly #redis: RedisClient;
  readonly #namespace: string | undefined;
  readonly #callerClock: boolean;

  constructor(options: TenantLimitsOptions) {
    this.#redis = options.redis;
    this.#namespace = options.keyNamespace;
    this.#callerClock = options.clock === 'caller';
  }

  /** The scripts' ARGV[1]: '' for Redis TIME, or the caller's ms (tests). */
  #now(nowMs: number): number | '' {
    return this.#callerClock ? nowMs : '';
  }

  #keys(tenant: string, keyId: string): string[] {
    const keys = tenantKeys(tenant, this.#namespace);
    return [keys.rates, keys.tenantLeases, keys.keyLeases(keyId)];
  }

  /** Checks every limit and takes from all of them, or from none. */
  async admit(request: AdmitRequest): Promise<AdmitOutcome> {
    request.rates.forEach(checkLimit);
    checkCount('reservedTokens', request.reservedTokens);
    checkCount('nowMs', request.nowMs);
    checkCount('leaseTtlMs', request.leaseTtlMs);
    const buckets = request.rates.map((limit) => ({
      f: bucketField(limit, request.keyId),
      n: limit.unit === 'tokens' ? request.reservedTokens : 1,
      p: limit.periodMs,
      l: limit.limit,
    }));
    const reply = await runScript(this.#redis, SCRIPTS.admitTenant, this.#keys(request.tenant, request.keyId), [
      this.#now(request.nowMs),
      request.leaseId,
      request.leaseTtlMs,
      JSON.stringify(buckets),
      request.concurrency?.tenant ?? 0,
      request.concurrency?.key ?? 0,
    ]);
    if (!Array.isArray(reply) || reply.length !== 3 + 2 * buckets.length)
      throw new RedisStoreError(
        'REDIS_STORE_ERR_BAD_REPLY',
        'admit-tenant',
        `admit-tenant.lua answered ${JSON.stringify(reply)}`,
      );
    const numbers = reply.map(Number);
    const rates = request.rates.map((limit, index) => ({
      limit,
      remaining: numbers[3 + 2 * index] as number,
      resetMs: numbers[4 + 2 * index] as number,
    }));
    if (numbers[0] === 1) return { admitted: true, rates };
    const refusedIndex = (numbers[2] as number) - 1;
    const refusedLimit = request.rates[refusedIndex];
    const refusedBy =
      refusedLimit !== undefined
        ? ({ kind: 'rate', limit: refusedLimit } as const)
        : ({ kind: 'concurrency', scope: refusedIndex === request.rates.length ? 'tenant' : 'key' } as const);
    const retryAfterMs = numbers[1] as number;
    return { admitted: false, retryAfterMs: retryAfterMs < 0 ? null : retryAfterMs, refusedBy, rates };
  }

  /**
   * The request is over: its concurrency leases go, and its token buckets are corrected by what it
   * used (`usedTokens`, from usage) against what was reserved. Returns how many leases were removed.
   */
  async release(
    request: Pick<AdmitRequest, 'tenant' | 'keyId' | 'leaseId' | 'nowMs' | 'rates' | 'reservedTokens'> & {
      readonly usedTokens: number;
    },
  ): Promise<number> {
    checkCount('usedTokens', request.usedTokens);
    checkCount('reservedTokens', request.reservedTokens);
    const corrections = request.rates
      .filter((limit) => limit.unit === 'tokens')
      .map((limit) => ({
        f: bucketField(limit, request.keyId),
        d: request.usedTokens - request.reservedTokens,
        p: limit.periodMs,
        l: limit.limit,
      }));
    return Number(
      await runScript(this.#redis, SCRIPTS.settleTenant, this.#keys(request.tenant, request.keyId), [
        this.#now(request.nowMs),
        request.leaseId,
        'release',
        JSON.stringify(corrections),
      ]),
    );
  }

  /** A long request is still running: its concurrency leases live `leaseTtlMs` more. Returns how many were renewed. */
  async renew(request: Pick<AdmitRequest, 'tenant' | 'keyId' | 'leaseId' | 'nowMs' | 'leaseTtlMs'>): Promise<number> {
    return Number(
      await runScript(this.#redis, SCRIPTS.settleTenant, this.#keys(request.tenant, request.keyId), [
        this.#now(request.nowMs),
        request.leaseId,
        'renew',
        request.leaseTtlMs,
      ]),
    );
  }
}
