/**
 * The routers' shared routing state on a real deployment (`--router-redis URL`): the Redis the deployed
 * router replicas share. Before each run its pools' routing state (prefix → backend owner index,
 * leases, in-flight and prefill figures) is deleted with `clearPoolState`, as the local cluster does,
 * so a run does not start with the ownership an earlier run recorded. The backend set and the health
 * poller's keys (`{fleet}`, `{poller}`) stay. Only between runs: routers serving meanwhile would lose
 * their in-flight counts.
 */
import {
  clearPoolState,
  createRedis,
  DEFAULT_KEY_NAMESPACE,
  isClusterUrl,
  parseClusterUrl,
  quitRedis,
  waitUntilReady,
  type RedisClient,
} from '@kvroute/redis-store';

/** `--router-redis` as given: a redis:// or rediss:// URL with a host, or a cluster's seeds (redis+cluster://…), else a clear error naming `flag`. */
export function parseRedisUrl(text: string, flag: string): string {
  const trimmed = text.trim();
  if (isClusterUrl(trimmed)) {
    try {
      parseClusterUrl(trimmed);
    } catch (error) {
      throw new Error(`${flag}: ${error instanceof Error ? error.message : String(error)}`);
    }
    return trimmed;
  }
  let url: URL | undefined;
  try {
    url = new URL(trimmed);
  } catch {
    url = undefined;
  }
  if (!url || (url.protocol !== 'redis:' && url.protocol !== 'rediss:') || url.hostname === '') {
    throw new Error(
      `${flag}: ${JSON.stringify(redisUrlForLog(trimmed))} is not a redis://, rediss:// or redis+cluster:// URL (e.g. redis://redis.internal:6379)`,
    );
  }
  return trimmed;
}

/** The URL without its user and password, for logs and errors. */
export function redisUrlForLog(text: string): string {
  if (isClusterUrl(text)) {
    // new URL() cannot read a host list: the log names the seeds, built from the parsed nodes only.
    try {
      const cluster = parseClusterUrl(text);
      const seeds = cluster.nodes.map(
        (node) => `${node.host.includes(':') ? `[${node.host}]` : node.host}:${node.port}`,
      );
      return `${cluster.tls ? 'rediss' : 'redis'}+cluster://${seeds.join(',')}`;
    } catch {
      return 'redis+cluster://(unreadable URL)';
    }
  }
  try {
    const url = new URL(text);
    return `${url.protocol}//${url.host}${url.pathname === '/' ? '' : url.pathname}`;
  } catch {
    return text.replace(/\/\/[^@/]*@/, '//');
  }
}

export interface RouterStateResetOptions {
  readonly url: string;
  /** The routers' key namespace (default `kvr:v1`, the routers' own default). */
  readonly namespace?: string;
  readonly log: (line: string) => void;
  /** How long the first connection may take before the run fails (default 10 s). */
  readonly readyTimeoutMs?: number;
}

/** Clears the routers' routing state before each run; connects on first use, `close` disconnects. */
export class RouterStateReset {
  private redis: RedisClient | undefined;
  private lastError: Error | undefined;

  constructor(private readonly options: RouterStateResetOptions) {}

  get namespace(): string {
    return this.options.namespace ?? DEFAULT_KEY_NAMESPACE;
  }

  /** Deletes the pools' routing state in the namespace and logs how many keys went; returns that count. */
  async clear(): Promise<number> {
    const redis = await this.connect();
    const deleted = await clearPoolState(redis, this.namespace);
    this.options.log(
      `router state: ${deleted} keys deleted from ${redisUrlForLog(this.options.url)} (namespace ${this.namespace})`,
    );
    return deleted;
  }

  async close(): Promise<void> {
    const redis = this.redis;
    this.redis = undefined;
    if (!redis) return;
    await quitRedis(redis);
  }

  private async connect(): Promise<RedisClient> {
    if (this.redis) return this.redis;
    const timeoutMs = this.options.readyTimeoutMs ?? 10_000;
    const redis = createRedis(this.options.url, 'worker', { onError: (error) => (this.lastError = error) });
    try {
      await waitUntilReady(redis, timeoutMs);
    } catch {
      redis.disconnect();
      const cause = this.lastError ? `: ${this.lastError.message}` : '';
      throw new Error(
        `--router-redis ${redisUrlForLog(this.options.url)}: not ready within ${timeoutMs / 1000} s${cause}`,
      );
    }
    this.redis = redis;
    return redis;
  }
}
