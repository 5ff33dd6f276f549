import { z } from 'zod';
import type { RateLimit } from '@kvroute/redis-store';
import { LimitFields, type Limits } from './api-key';

/**
 * Tenants as the operator configures them (router config `tenants`): each tenant's own limits (over all
 * its keys) and its team, the prefix-cache pool it shares with the team's other tenants. A tenant not
 * listed has no tenant-wide limits and a cache of its own; its keys' limits still apply.
 */
export const TenantConfig = z.strictObject({
  id: z.string().min(1).describe('tenant id, as API key records name it'),
  team: z
    .string()
    .min(1)
    .optional()
    .describe("tenants with the same team share one prefix-cache partition (one salt); absent = the tenant's own"),
  ...LimitFields,
});
export type TenantConfig = z.infer<typeof TenantConfig>;

const MINUTE_MS = 60_000;

/** The GCRA limits (per minute) of a tenant's and a key's limits, tenant first. */
export function rateLimitsOf(tenant: Limits | undefined, key: Limits): RateLimit[] {
  const rates: RateLimit[] = [];
  const add = (scope: RateLimit['scope'], limits: Limits | undefined): void => {
    if (limits?.requestsPerMinute !== undefined)
      rates.push({ scope, unit: 'requests', limit: limits.requestsPerMinute, periodMs: MINUTE_MS });
    if (limits?.tokensPerMinute !== undefined)
      rates.push({ scope, unit: 'tokens', limit: limits.tokensPerMinute, periodMs: MINUTE_MS });
  };
  add('tenant', tenant);
  add('key', key);
  return rates;
}

export class TenantDirectory {
  readonly #tenants: ReadonlyMap<string, TenantConfig>;

  constructor(tenants: readonly TenantConfig[]) {
    this.#tenants = new Map(tenants.map((tenant) => [tenant.id, tenant]));
  }

  limitsOf(tenant: string): TenantConfig | undefined {
    return this.#tenants.get(tenant);
  }

  /** The partition of the prefix cache a tenant's requests use: its team's, or its own. */
  cacheScopeOf(tenant: string): string {
    const team = this.#tenants.get(tenant)?.team;
    return team === undefined ? `tenant\u0000${tenant}` : `team\u0000${team}`;
  }
}
