import type { AdmitOutcome, AdmitRequest, RateState } from '@kvroute/redis-store';

/**
 * The tenant limits of one replica while Redis is unreachable: the same rules as admit-tenant.lua and
 * settle-tenant.lua (GCRA rates, concurrency leases), in memory. The caller hands it the replica's
 * share of each limit (limit ÷ live replicas), so the fleet as a whole stays near the limit. Memory is
 * bounded: buckets that are full again and tenants with no request in flight are dropped on the way.
 */
export class LocalTenantLimits {
  /** Bucket field (tenant-qualified) → theoretical arrival time, ms. */
  readonly #tats = new Map<string, number>();
  /** Concurrency scope (tenant-qualified) → lease id → deadline ms. */
  readonly #leases = new Map<string, Map<string, number>>();
  /** Beyond this many buckets, full ones are swept before a new one is added. */
  readonly #maxBuckets: number;

  constructor(maxBuckets = 100_000) {
    this.#maxBuckets = maxBuckets;
  }

  admit(request: AdmitRequest): AdmitOutcome {
    const now = request.nowMs;
    let admitted = true;
    let retryAfterMs: number | null = 0;
    let refusedIndex = -1;
    const next: number[] = [];
    request.rates.forEach((limit, index) => {
      const units = limit.unit === 'tokens' ? request.reservedTokens : 1;
      const interval = limit.periodMs / limit.limit;
      const tat = Math.max(this.#tats.get(this.#field(request, index)) ?? now, now);
      const newTat = tat + units * interval;
      next.push(newTat);
      if (units > limit.limit) {
        if (admitted) refusedIndex = index;
        admitted = false;
        retryAfterMs = null;
      } else if (newTat - now > limit.periodMs + 1e-3) {
        if (admitted) refusedIndex = index;
        admitted = false;
        if (retryAfterMs !== null) retryAfterMs = Math.max(retryAfterMs, Math.ceil(newTat - now - limit.periodMs));
      }
    });
    const caps: [string, number | undefined][] = [
      [`${request.tenant}\u0000tenant`, request.concurrency?.tenant],
      [`${request.tenant}\u0000key:${request.keyId}`, request.concurrency?.key],
    ];
    caps.forEach(([scope, cap], index) => {
      if (cap === undefined || cap <= 0) return;
      const leases = this.#purged(scope, now);
      if ((leases?.size ?? 0) >= cap) {
        if (admitted) refusedIndex = request.rates.length + index;
        admitted = false;
        if (retryAfterMs !== null) retryAfterMs = Math.max(retryAfterMs, 1_000);
      }
    });
    const rates: RateState[] = request.rates.map((limit, index) => {
      const interval = limit.periodMs / limit.limit;
      const tat = Math.max(this.#tats.get(this.#field(request, index)) ?? now, now);
      const after = admitted ? (next[index] as number) : tat;
      return {
        limit,
        remaining: Math.max(0, Math.floor((limit.periodMs - (after - now)) / interval + 1e-3 / interval)),
        resetMs: Math.max(0, Math.ceil(after - now)),
      };
    });
    if (!admitted) {
      const refusedLimit = request.rates[refusedIndex];
      const refusedBy =
        refusedLimit !== undefined
          ? ({ kind: 'rate', limit: refusedLimit } as const)
          : ({ kind: 'concurrency', scope: refusedIndex === request.rates.length ? 'tenant' : 'key' } as const);
      return { admitted: false, retryAfterMs, refusedBy, rates };
    }
    if (this.#tats.size >= this.#maxBuckets) this.#sweep(now);
    request.rates.forEach((_limit, index) => this.#tats.set(this.#field(request, index), next[index] as number));
    for (const [scope, cap] of caps) {
      if (cap === undefined || cap <= 0) continue;
      let leases = this.#leases.get(scope);
      if (leases === undefined) this.#leases.set(scope, (leases = new Map()));
      leases.set(request.leaseId, now + request.leaseTtlMs);
    }
    return { admitted: true, rates };
  }

  /** The request is over: its leases go, its token buckets are corrected by used − reserved (as settle-tenant.lua). */
  release(
    request: Pick<AdmitRequest, 'tenant' | 'keyId' | 'leaseId' | 'nowMs' | 'rates' | 'reservedTokens'> & {
      readonly usedTokens: number;
    },
  ): void {
    for (const scope of [`${request.tenant}\u0000tenant`, `${request.tenant}\u0000key:${request.keyId}`]) {
      const leases = this.#leases.get(scope);
      leases?.delete(request.leaseId);
      if (leases?.size === 0) this.#leases.delete(scope);
    }
    request.rates.forEach((limit, index) => {
      if (limit.unit !== 'tokens') return;
      const field = this.#field(request, index);
      const tat = Math.max(this.#tats.get(field) ?? request.nowMs, request.nowMs);
      const corrected = Math.max(
        request.nowMs,
        tat + ((request.usedTokens - request.reservedTokens) * limit.periodMs) / limit.limit,
      );
      if (corrected > request.nowMs) this.#tats.set(field, corrected);
      else this.#tats.delete(field);
    });
  }

  #field(request: Pick<AdmitRequest, 'tenant' | 'keyId' | 'rates'>, index: number): string {
    const limit = request.rates[index];
    if (limit === undefined) throw new RangeError(`no rate ${index}`);
    return `${request.tenant}\u0000${limit.scope === 'key' ? `key:${request.keyId}` : 'tenant'}:${limit.unit}:${limit.periodMs}`;
  }

  #purged(scope: string, now: number): Map<string, number> | undefined {
    const leases = this.#leases.get(scope);
    if (leases === undefined) return undefined;
    for (const [id, deadline] of leases) if (deadline <= now) leases.delete(id);
    if (leases.size === 0) this.#leases.delete(scope);
    return leases;
  }

  /** Full buckets (TAT in the past) hold nothing: dropped, as the Redis hash's expiry drops them. */
  #sweep(now: number): void {
    for (const [field, tat] of this.#tats) if (tat <= now) this.#tats.delete(field);
  }
}
