/**
 * A real deployment as a run target: routers and backends someone else started (e.g. kvroute in front
 * of vLLM on A100 pods). The bench cannot switch a deployed router's policy, so each policy to compare
 * is its own router deployment over the same backends: `--router cacheaware=URL,roundrobin=URL`
 * (several URLs for one policy = its replicas). A plain `--router URL` runs whatever policy is
 * deployed, under the one label given by `--policies`.
 *
 * Cold caches between runs: with `resetCache`, every backend gets `POST /reset_prefix_cache` (vLLM's
 * endpoint; the server needs `VLLM_SERVER_DEV_MODE=1`), and `/sim/reset-cache` is tried for vllm-sim.
 * With `routerRedisUrl` (`--router-redis`), the routers' shared routing state in that Redis (prefix
 * ownership, leases) is deleted too (`router-state.ts`), so no run inherits an earlier run's ownership.
 */
import { ORACLE_POLICIES } from '../report';
import { RouterStateReset } from './router-state';
import type { RunTarget } from './run-scenario';

export const ANY_POLICY = '*';
/** The router's `opsPort` default (apps/router config.ts). */
const DEFAULT_ROUTER_OPS_PORT = 9464;

/** `cacheaware=http://a,cacheaware=http://b,http://c` → { cacheaware: [a, b], '*': [c] }. */
export function parseRouterList(text: string): Map<string, string[]> {
  const byPolicy = new Map<string, string[]>();
  for (const entry of text
    .split(',')
    .map((part) => part.trim())
    .filter(Boolean)) {
    const match = /^([a-z][a-z0-9-]*)=(.+)$/.exec(entry);
    const [policy, url] = match ? [match[1] as string, match[2] as string] : [ANY_POLICY, entry];
    if (!/^https?:\/\//.test(url)) throw new Error(`--router: ${JSON.stringify(entry)} is not URL or policy=URL`);
    byPolicy.set(policy, [...(byPolicy.get(policy) ?? []), url.replace(/\/+$/, '')]);
  }
  if (byPolicy.size === 0) throw new Error('--router: no router URL');
  return byPolicy;
}

export interface RemoteTargetOptions {
  readonly routers: ReadonlyMap<string, readonly string[]>;
  readonly backendUrls: readonly string[];
  readonly resetCache: boolean;
  /** The Redis the routers share (`--router-redis`): its pools' routing state is deleted before each run. */
  readonly routerRedisUrl?: string;
  /** The routers' key namespace in that Redis (default `kvr:v1`, what routers use). */
  readonly routerRedisNamespace?: string;
  /** The routers' ops port (`--router-ops-port`, default 9464): their /metrics is there, not on the URL requests go to. */
  /**
   * The routers' ops ports (`--router-ops-port`), where their /metrics is: one for every router, or one
   * per router URL in the order `routers` lists them (several routers on one host); default 9464.
   */
  readonly routerOpsPorts?: readonly number[];
  readonly log: (line: string) => void;
  readonly fetch?: typeof fetch;
}

export class RemoteTarget implements RunTarget {
  private warnedWarm = false;
  private warnedRouterState = false;
  private readonly routerState: RouterStateReset | undefined;
  /** Each router URL's ops port. */
  private readonly opsPorts = new Map<string, number>();

  constructor(private readonly options: RemoteTargetOptions) {
    const urls = [...options.routers.values()].flat();
    const ports = options.routerOpsPorts ?? [DEFAULT_ROUTER_OPS_PORT];
    if (ports.length !== 1 && ports.length !== urls.length)
      throw new Error(
        `--router-ops-port: ${ports.length} ports for ${urls.length} routers (give one for all, or one per router in --router's order)`,
      );
    urls.forEach((url, index) => this.opsPorts.set(url, (ports.length === 1 ? ports[0] : ports[index]) as number));
    this.routerState =
      options.routerRedisUrl === undefined
        ? undefined
        : new RouterStateReset({
            url: options.routerRedisUrl,
            namespace: options.routerRedisNamespace,
            log: options.log,
          });
  }

  get backendUrls(): readonly string[] {
    return this.options.backendUrls;
  }

  supports(policy: string): boolean {
    if (ORACLE_POLICIES.includes(policy)) return false; // bench-side routers over the local cluster's sims (bench/src/oracle), never deployed
    return this.options.routers.has(policy) || this.options.routers.has(ANY_POLICY);
  }

  async startRun(policy: string): Promise<string[]> {
    const routers = this.options.routers.get(policy) ?? this.options.routers.get(ANY_POLICY);
    if (!routers) throw new Error(`no router given for policy ${policy}`);
    if (this.routerState) await this.routerState.clear();
    else if (!this.warnedRouterState) {
      this.warnedRouterState = true;
      this.options.log(
        "routers' shared routing state in Redis is not cleared between runs (pass --router-redis URL): later runs inherit earlier runs' prefix ownership",
      );
    }
    if (this.options.resetCache) await Promise.all(this.options.backendUrls.map((url) => this.resetBackend(url)));
    else if (!this.warnedWarm) {
      this.warnedWarm = true;
      this.options.log('caches are not reset between runs (pass --reset-cache): later runs start warm');
    }
    return [...routers];
  }

  /** The router's host on its ops port: reachable from the bench only where the deployment lets it (else no prediction counters). */
  metricsUrlOf(routerUrl: string): string {
    const url = new URL(routerUrl);
    url.port = String(this.opsPorts.get(routerUrl) ?? DEFAULT_ROUTER_OPS_PORT);
    return url.origin;
  }

  async endRun(): Promise<void> {
    // Nothing to stop: the deployment outlives the bench.
  }

  /** Closes what this target opened (the `--router-redis` connection); the deployment keeps running. */
  async close(): Promise<void> {
    await this.routerState?.close();
  }

  private async resetBackend(url: string): Promise<void> {
    const doFetch = this.options.fetch ?? fetch;
    for (const path of ['/reset_prefix_cache', '/sim/reset-cache']) {
      try {
        const response = await doFetch(new URL(path, url), { method: 'POST' });
        if (response.ok) return;
      } catch {
        // try the next one
      }
    }
    this.options.log(
      `${url}: could not reset its prefix cache (vLLM needs VLLM_SERVER_DEV_MODE=1 for POST /reset_prefix_cache)`,
    );
  }
}
