import type { RedisClient } from '@kvroute/redis-store';

/**
 * Which replica applies what discovery finds. Every replica looks at the source, but with a shared
 * backend set in Redis only one, the holder of a lease, changes the set: two replicas whose resolvers
 * saw a record change at different moments (caches, TTLs) would otherwise undo each other's change
 * until both agreed, and the fleet's set would flap. The lease is renewed on every apply; when its
 * holder stops (or cannot reach Redis) another replica takes it within `ttlMs`.
 */
export interface DiscoveryLeadership {
  /** Takes or renews the lease; true while this replica holds it. Never throws. */
  holds(): Promise<boolean>;
  /** Gives the lease up (shutdown), so another replica takes over at once. Never throws. */
  release(): Promise<void>;
}

/** Without Redis each replica's set is its own: it always applies. */
export const SOLE_REPLICA: DiscoveryLeadership = { holds: async () => true, release: async () => undefined };

/** Takes the lease if free, renews it if ours: 1 = held by `ARGV[1]` for `ARGV[2]` ms from now. */
const HOLD_SCRIPT = `
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
`;

const RELEASE_SCRIPT = `
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`;

export interface RedisDiscoveryLeaseOptions {
  /** A request-path connection: fails fast while Redis is away (the set cannot be changed then anyway). */
  readonly redis: RedisClient;
  /** One key per discovery source (the id prefix), so two sources never share a lease. */
  readonly key: string;
  /** This replica (random per process). */
  readonly holder: string;
  /** How long a lease outlives its last renewal, ms (several refreshes). */
  readonly ttlMs: number;
}

export class RedisDiscoveryLease implements DiscoveryLeadership {
  constructor(private readonly options: RedisDiscoveryLeaseOptions) {}

  async holds(): Promise<boolean> {
    try {
      return (
        Number(
          await this.options.redis.eval(
            HOLD_SCRIPT,
            1,
            this.options.key,
            this.options.holder,
            String(this.options.ttlMs),
          ),
        ) === 1
      );
    } catch {
      return false;
    }
  }

  async release(): Promise<void> {
    await this.options.redis.eval(RELEASE_SCRIPT, 1, this.options.key, this.options.holder).catch(() => undefined);
  }
}
