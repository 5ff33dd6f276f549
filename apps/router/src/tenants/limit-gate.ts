import type { FastifyBaseLogger } from 'fastify';
import type { AdmitOutcome, AdmitRequest, RateLimit, TenantLimits } from '@kvroute/redis-store';
import { LocalTenantLimits } from './local-limits';

/**
 * Where tenant limits are checked: in Redis (exact across every replica, one script per admission),
 * or, while Redis is unreachable, in this replica's memory with its share of each limit (limit ÷ the
 * live replicas Redis last counted, at least 1), logged once per change of mode. A request is settled
 * where it was admitted. Without Redis at all (a single replica, a key file) the local limits are the
 * whole limits (share 1).
 */
export interface LimitGateOptions {
  /** Null: no Redis; the local limits are the only ones. */
  readonly shared: Pick<TenantLimits, 'admit' | 'release' | 'renew'> | null;
  /** Router replicas alive as last seen (the share's divisor), ≥ 1. */
  readonly liveReplicas: () => number;
  /** After a failed Redis call, how long to stay local before trying Redis again, ms. */
  readonly retryAfterMs: number;
  /** Monotonic ms. */
  readonly clockMs: () => number;
  readonly logger: FastifyBaseLogger;
}

/** An admitted request's handle: where it was admitted, so that it is settled there. */
export interface GateTicket {
  readonly where: 'shared' | 'local';
  readonly request: AdmitRequest;
}

export type GateOutcome = AdmitOutcome & { readonly ticket: GateTicket | null; readonly share: number };

export class LimitGate {
  readonly #options: LimitGateOptions;
  readonly #local = new LocalTenantLimits();
  #localUntilMs = -Infinity;
  #mode: 'shared' | 'local';

  constructor(options: LimitGateOptions) {
    this.#options = options;
    this.#mode = options.shared === null ? 'local' : 'shared';
  }

  /** Whether admissions are checked in this replica's memory now (Redis away, or none). */
  get degraded(): boolean {
    return this.#options.shared !== null && this.#mode === 'local';
  }

  async admit(request: AdmitRequest): Promise<GateOutcome> {
    const { shared } = this.#options;
    if (shared !== null && this.#options.clockMs() >= this.#localUntilMs) {
      try {
        const outcome = await shared.admit(request);
        this.#switch('shared', null);
        return { ...outcome, ticket: outcome.admitted ? { where: 'shared', request } : null, share: 1 };
      } catch (error) {
        this.#localUntilMs = this.#options.clockMs() + this.#options.retryAfterMs;
        this.#switch('local', error);
      }
    }
    const share = shared === null ? 1 : Math.max(1, this.#options.liveReplicas());
    const local = share === 1 ? request : shareOf(request, share);
    const outcome = this.#local.admit(local);
    return { ...outcome, ticket: outcome.admitted ? { where: 'local', request: local } : null, share };
  }

  /** Settles an admitted request where it was admitted; a shared settle that fails is logged and dropped (its leases expire). */
  async release(ticket: GateTicket, usedTokens: number, nowMs: number): Promise<void> {
    // Requests-only limits hold nothing to give back: no call (one script per request instead of two).
    const { concurrency, rates } = ticket.request;
    if (!(concurrency?.tenant ?? 0) && !(concurrency?.key ?? 0) && !rates.some((rate) => rate.unit === 'tokens'))
      return;
    const request = { ...ticket.request, nowMs, usedTokens };
    if (ticket.where === 'local' || this.#options.shared === null) {
      this.#local.release(request);
      return;
    }
    try {
      await this.#options.shared.release(request);
    } catch (error) {
      this.#options.logger.debug({ err: error }, 'tenant settle failed; its leases expire by themselves');
    }
  }

  /** Keeps a long request's concurrency leases alive (shared only: local leases are this process's). */
  async renew(ticket: GateTicket, nowMs: number): Promise<void> {
    if (ticket.where !== 'shared' || this.#options.shared === null) return;
    await this.#options.shared.renew({ ...ticket.request, nowMs }).catch(() => undefined);
  }

  #switch(mode: 'shared' | 'local', error: unknown): void {
    if (this.#mode === mode) return;
    this.#mode = mode;
    if (mode === 'local') {
      this.#options.logger.warn(
        { err: error, liveReplicas: this.#options.liveReplicas() },
        'tenant limits: Redis unreachable; this replica enforces its share (each limit ÷ live replicas) in memory',
      );
    } else {
      this.#options.logger.warn('tenant limits: Redis reachable again; limits are shared and exact again');
    }
  }
}

/** The request with each limit cut to this replica's share (at least 1). */
function shareOf(request: AdmitRequest, share: number): AdmitRequest {
  const cut = (value: number): number => Math.max(1, Math.floor(value / share));
  const rates: RateLimit[] = request.rates.map((limit) => ({ ...limit, limit: cut(limit.limit) }));
  const concurrency =
    request.concurrency === undefined
      ? undefined
      : {
          tenant: request.concurrency.tenant ? cut(request.concurrency.tenant) : 0,
          key: request.concurrency.key ? cut(request.concurrency.key) : 0,
        };
  return { ...request, rates, ...(concurrency === undefined ? {} : { concurrency }) };
}
