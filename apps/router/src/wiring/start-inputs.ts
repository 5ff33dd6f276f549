import { backendsWithRoles } from '../pd/pd-config';
import { lookup } from 'node:dns/promises';
import { networkInterfaces } from 'node:os';
import type { FastifyBaseLogger } from 'fastify';
import { loadUpstreamKeys, type UpstreamKeys } from '@kvroute/platform';
import { policyParamsFromSettings } from '@kvroute/routing';
import { BackendAddressPolicy, type ResolveHost } from '../admin/backend-address-policy';
import { adminTokenOf, opsHostOf, type RouterConfig } from '../config';
import { PolicyTable } from '../routing/policy-table';
import { readDiscoverySettings, type DiscoverySettings } from './discovery-wiring';

/**
 * What a replica reads and checks before it opens anything (no connection, pool or timer), so that a
 * bad value fails the start with nothing to close: a policy parameter out of range, an upstream key
 * file or variable that cannot be read, the admin token, the discovery settings, a configured backend
 * the address policy denies.
 */
export interface StartInputs {
  readonly policies: PolicyTable;
  readonly upstreamKeys: UpstreamKeys;
  /** The admin listener's token; null: no admin listener. */
  readonly adminToken: string | null;
  /** Null: no `discovery`. */
  readonly discovery: DiscoverySettings | null;
  readonly addressPolicy: BackendAddressPolicy;
}

export interface StartInputsDeps {
  /** Where `apiKeyEnv`/`upstreamApiKeyEnv` and the Kubernetes variables are read. */
  readonly env: Readonly<Record<string, string | undefined>>;
  /** How backend host names are resolved for the address check (default: the system resolver, every address). */
  readonly resolveHost: ResolveHost | undefined;
  readonly readText: (path: string) => string;
  readonly logger: FastifyBaseLogger | undefined;
}

export async function readStartInputs(config: RouterConfig, deps: StartInputsDeps): Promise<StartInputs> {
  // Policies first: pure, and a parameter out of range fails here.
  const policies = new PolicyTable({
    policy: config.policy,
    passthroughPolicy: config.passthroughPolicy,
    prefillPolicy: config.pdPrefillPolicy,
    params: policyParamsFromSettings(config),
    calibratedFigures: config.calibrateCostModel ? config.calibratedFigures : [],
  });
  const upstreamKeys = loadUpstreamKeys(config, { env: deps.env });
  const adminToken = adminTokenOf(config, deps.readText);
  const discovery = readDiscoverySettings(config, deps.env, deps.readText);
  const addressPolicy = new BackendAddressPolicy({
    allowlist: config.backendAllowlist,
    redisUrl: config.redisUrl,
    resolve: deps.resolveHost ?? resolveAll,
    localAddresses: localAddresses(),
    // The configured ports deny the loop before the configured backends are checked; after listen the
    // wiring adds the bound ones (port 0 picks one then).
    ownListeners: [
      { address: config.host, port: config.port },
      { address: opsHostOf(config), port: config.opsPort },
      ...(adminToken === null ? [] : [{ address: config.adminHost, port: config.adminPort }]),
    ],
  });
  await refuseDeniedBackends(config, addressPolicy, deps.logger);
  return { policies, upstreamKeys, adminToken, discovery, addressPolicy };
}

/** This host's interface addresses: with loopback, what the address guard counts as this host. */
function localAddresses(): string[] {
  return Object.values(networkInterfaces()).flatMap((entries) => (entries ?? []).map((entry) => entry.address));
}

/** Every address of a name, as the system resolver (and so a connection) would see them. */
const resolveAll: ResolveHost = async (hostname) =>
  (await lookup(hostname, { all: true })).map((entry) => ({
    address: entry.address,
    family: entry.family === 6 ? 6 : 4,
  }));

/**
 * The configured backends pass the same address check as admin adds: a denied one fails the start before
 * anything connects. A name that does not resolve yet (DNS not ready at start) is let through, as before.
 */
async function refuseDeniedBackends(
  config: RouterConfig,
  policy: BackendAddressPolicy,
  logger: FastifyBaseLogger | undefined,
): Promise<void> {
  for (const backend of backendsWithRoles(config)) {
    const verdict = await policy.check(backend.url);
    if (verdict.allowed) continue;
    if (verdict.unresolved === true) {
      logger?.warn(
        { url: backend.url, reason: verdict.reason },
        'backend address not checked: it does not resolve yet',
      );
      continue;
    }
    throw new Error(`backends: ${backend.url} is not an allowed backend: ${verdict.reason} (backendAllowlist)`);
  }
}
