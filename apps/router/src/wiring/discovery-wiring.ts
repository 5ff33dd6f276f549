import { randomUUID } from 'node:crypto';
import { Resolver } from 'node:dns/promises';
import { hostname } from 'node:os';
import type { FastifyBaseLogger } from 'fastify';
import type { ShutdownStack } from '@kvroute/platform';
import { DEFAULT_KEY_NAMESPACE, type RedisClient } from '@kvroute/redis-store';
import type { BackendAddressPolicy } from '../admin/backend-address-policy';
import type { BackendChanges } from '../backends/backend-changes';
import type { BackendRegistry } from '../backends/backend-registry';
import type { RouterConfig } from '../config';
import type { BackendSource } from '../discovery/backend-source';
import { DiscoveryApplier } from '../discovery/discovery-applier';
import { RedisDiscoveryLease, SOLE_REPLICA } from '../discovery/discovery-leader';
import { parseDiscoveryTarget, type DiscoveryTarget } from '../discovery/discovery-target';
import { DnsBackendSource } from '../discovery/dns-discovery';
import type { RouterMetrics } from '../router-metrics';

export interface DiscoveryWiringDeps {
  readonly registry: BackendRegistry;
  /** The admin API's path (backends-wiring.ts): discovery changes the set the way an admin does. */
  readonly changes: BackendChanges;
  /** The request-path Redis connection (the discovery lease lives there); null without Redis. */
  readonly redis: RedisClient | null;
  readonly addressPolicy: Pick<BackendAddressPolicy, 'check'>;
  readonly metrics: Pick<RouterMetrics, 'recordDiscoveryFailure'>;
  readonly nowMs: () => number;
  readonly logger: FastifyBaseLogger | undefined;
  /** Where the Kubernetes API server is named (`KUBERNETES_SERVICE_HOST`/`_PORT`). */
  readonly env: Readonly<Record<string, string | undefined>>;
}

export interface DiscoveryParts {
  /** Looks at the source once and applies the answer, then goes on (call after the shared set is followed). */
  start(): Promise<void>;
}

/** Backend discovery, if `discovery` is set: its source, its lease (with Redis) and the applier; its closer onto `closers`. */
export function wireDiscovery(config: RouterConfig, deps: DiscoveryWiringDeps, closers: ShutdownStack): DiscoveryParts | null {
  if (config.discovery === undefined) return null;
  const target = parseDiscoveryTarget(config.discovery, config.discoveryName);
  const logger = deps.logger?.child({ component: 'discovery', source: target.kind, name: target.name });
  const source = createSource(target, config);
  const leadership =
    deps.redis === null
      ? SOLE_REPLICA
      : new RedisDiscoveryLease({
          redis: deps.redis,
          key: `${DEFAULT_KEY_NAMESPACE}:discovery-lease:${target.name}`,
          holder: `${hostname()}:${process.pid}:${randomUUID()}`,
          // Renewed every refresh: three missed renewals hand the lease to another replica.
          ttlMs: 3 * config.discoveryRefreshMs,
        });
  const applier = new DiscoveryApplier({
    source,
    changes: deps.changes,
    registry: deps.registry,
    leadership,
    admitUrl: (url) => deps.addressPolicy.check(url),
    removeAfterMs: config.discoveryRemoveAfterMs,
    reapplyMs: config.discoveryRefreshMs,
    nowMs: deps.nowMs,
    onFailure: (kind) => deps.metrics.recordDiscoveryFailure(kind),
    logger,
  });
  closers.push('backend discovery', () => applier.stop());
  return { start: () => applier.start() };
}

function createSource(target: DiscoveryTarget, config: RouterConfig): BackendSource {
  if (target.kind === 'k8s') throw new Error('k8s discovery is not wired yet');
  // Queries go straight to the configured servers (or the system's): `tries: 1` so a server that does
  // not answer costs one timeout, and the look fails rather than waiting for c-ares' four tries.
  const resolver = new Resolver({ timeout: config.discoveryDnsTimeoutMs, tries: 1 });
  if (config.discoveryDnsServers.length > 0) resolver.setServers(config.discoveryDnsServers);
  return new DnsBackendSource({ target, resolver, scheme: config.discoveryScheme, maxBackends: config.discoveryMaxBackends, refreshMs: config.discoveryRefreshMs });
}
