import { randomUUID } from 'node:crypto';
import { Resolver } from 'node:dns/promises';
import { readFile } from 'node:fs/promises';
import { hostname } from 'node:os';
import type { FastifyBaseLogger } from 'fastify';
import type { ShutdownStack } from '@kvroute/platform';
import { DEFAULT_KEY_NAMESPACE, type RedisClient } from '@kvroute/redis-store';
import { Agent } from 'undici';
import type { BackendAddressPolicy } from '../admin/backend-address-policy';
import type { BackendChanges } from '../backends/backend-changes';
import type { BackendRegistry } from '../backends/backend-registry';
import type { RouterConfig } from '../config';
import type { BackendSource } from '../discovery/backend-source';
import { DiscoveryApplier } from '../discovery/discovery-applier';
import { RedisDiscoveryLease, SOLE_REPLICA } from '../discovery/discovery-leader';
import { parseDiscoveryTarget, type DiscoveryTarget } from '../discovery/discovery-target';
import { DnsBackendSource } from '../discovery/dns-discovery';
import { EndpointSliceSource } from '../discovery/kubernetes-discovery';
import type { RouterMetrics } from '../router-metrics';

/**
 * What discovery needs that can be missing or wrong (the target, the pod's namespace and the API
 * server's CA): read by `readDiscoverySettings` before the router opens anything, so a bad value fails
 * the start with nothing to close.
 */
export type DiscoverySettings =
  | { readonly target: Extract<DiscoveryTarget, { kind: 'dns' | 'dns+srv' }> }
  | {
      readonly target: Extract<DiscoveryTarget, { kind: 'k8s' }>;
      readonly apiUrl: string;
      readonly namespace: string;
      readonly ca: string | null;
    };

/** The discovery settings of a config (null: no `discovery`). Throws a message naming what is missing. */
export function readDiscoverySettings(
  config: RouterConfig,
  env: Readonly<Record<string, string | undefined>>,
  readText: (path: string) => string,
): DiscoverySettings | null {
  if (config.discovery === undefined) return null;
  const target = parseDiscoveryTarget(config.discovery, config.discoveryName);
  if (target.kind !== 'k8s') return { target };
  const apiUrl = (config.discoveryKubernetesApiUrl ?? apiUrlFromEnv(env)).replace(/\/+$/, '');
  // A pod without its service account (automountServiceAccountToken: false) fails here, saying which file.
  const namespace = target.namespace ?? readText(config.discoveryKubernetesNamespaceFile).trim();
  const ca = apiUrl.startsWith('https:') ? readText(config.discoveryKubernetesCaFile) : null;
  return { target, apiUrl, namespace, ca };
}

export interface DiscoveryWiringDeps {
  readonly registry: BackendRegistry;
  /** The admin API's path (backends-wiring.ts): discovery changes the set the way an admin does. */
  readonly changes: BackendChanges;
  /** The request-path Redis connection (the discovery lease lives there); null without Redis. */
  readonly redis: RedisClient | null;
  readonly addressPolicy: Pick<BackendAddressPolicy, 'check'>;
  readonly metrics: Pick<RouterMetrics, 'recordDiscoveryFailure' | 'setDiscoveryLeading'>;
  readonly nowMs: () => number;
  readonly logger: FastifyBaseLogger | undefined;
}

export interface DiscoveryParts {
  /** Looks at the source once and applies the answer, then goes on (call after the shared set is followed). */
  start(): Promise<void>;
}

/** Backend discovery: its source, its lease (with Redis) and the applier; closers onto `closers` as each opens. */
export function wireDiscovery(
  settings: DiscoverySettings,
  config: RouterConfig,
  deps: DiscoveryWiringDeps,
  closers: ShutdownStack,
): DiscoveryParts {
  const { target } = settings;
  const logger = deps.logger?.child({ component: 'discovery', source: target.kind, name: target.name });
  const source = createSource(settings, config, closers, logger);
  // Renewed every refresh: three missed renewals hand the lease to another replica.
  const leaseTtlMs = 3 * config.discoveryRefreshMs;
  const leadership =
    deps.redis === null
      ? SOLE_REPLICA
      : new RedisDiscoveryLease({
          redis: deps.redis,
          key: `${DEFAULT_KEY_NAMESPACE}:discovery-lease:${target.name}`,
          holder: `${hostname()}:${process.pid}:${randomUUID()}`,
          ttlMs: leaseTtlMs,
        });
  const applier = new DiscoveryApplier({
    source,
    changes: deps.changes,
    registry: deps.registry,
    leadership,
    admitUrl: (url) => deps.addressPolicy.check(url),
    removeAfterMs: config.discoveryRemoveAfterMs,
    reapplyMs: config.discoveryRefreshMs,
    // A source failing about as long as the lease lives: stop renewing it, so a replica whose source answers takes over.
    staleAfterMs: leaseTtlMs,
    nowMs: deps.nowMs,
    onFailure: (kind) => deps.metrics.recordDiscoveryFailure(kind),
    onLeadership: (leading) => deps.metrics.setDiscoveryLeading(target.kind, leading),
    logger,
  });
  closers.push('backend discovery', () => applier.stop());
  return { start: () => applier.start() };
}

/** Retries after a failed list or watch: 1 s, doubling, at most 30 s. */
const K8S_RETRY_BASE_MS = 1_000;
const K8S_RETRY_MAX_MS = 30_000;
/** The API server ends each watch after this long (a new one starts from the last resourceVersion), s. */
const K8S_WATCH_TIMEOUT_S = 300;
const K8S_REQUEST_TIMEOUT_MS = 10_000;

function createSource(
  settings: DiscoverySettings,
  config: RouterConfig,
  closers: ShutdownStack,
  logger: FastifyBaseLogger | undefined,
): BackendSource {
  if (settings.target.kind === 'k8s' && 'apiUrl' in settings) {
    const dispatcher = new Agent(settings.ca === null ? {} : { connect: { ca: settings.ca } });
    closers.push('kubernetes API connections', () => dispatcher.close());
    return new EndpointSliceSource({
      target: settings.target,
      namespace: settings.namespace,
      api: {
        url: settings.apiUrl,
        dispatcher,
        // Projected tokens are rotated by the kubelet: read for every request. No file (outside a pod, a test): none sent.
        token: async () =>
          (await readFile(config.discoveryKubernetesTokenFile, 'utf8').catch(() => null))?.trim() ?? null,
      },
      scheme: config.discoveryScheme,
      maxBackends: config.discoveryMaxBackends,
      watchTimeoutSeconds: K8S_WATCH_TIMEOUT_S,
      requestTimeoutMs: K8S_REQUEST_TIMEOUT_MS,
      retryDelayMs: (attempt) => Math.min(K8S_RETRY_MAX_MS, K8S_RETRY_BASE_MS * 2 ** Math.min(attempt, 10)),
      logger,
    });
  }
  if (settings.target.kind === 'k8s') throw new Error('k8s discovery settings without the API server');
  // Queries go straight to the configured servers (or the system's): `tries: 1` so a server that does
  // not answer costs one timeout, and the look fails rather than waiting for c-ares' four tries.
  const resolver = new Resolver({ timeout: config.discoveryDnsTimeoutMs, tries: 1 });
  if (config.discoveryDnsServers.length > 0) resolver.setServers(config.discoveryDnsServers);
  return new DnsBackendSource({
    target: settings.target,
    resolver,
    scheme: config.discoveryScheme,
    maxBackends: config.discoveryMaxBackends,
    refreshMs: config.discoveryRefreshMs,
  });
}

/** The in-cluster API server, as every pod's environment names it. */
function apiUrlFromEnv(env: Readonly<Record<string, string | undefined>>): string {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT ?? '443';
  if (host === undefined || host === '')
    throw new Error(
      'discovery k8s://: KUBERNETES_SERVICE_HOST is not set (not in a pod?); set discoveryKubernetesApiUrl',
    );
  return `https://${host.includes(':') ? `[${host}]` : host}:${port}`;
}
