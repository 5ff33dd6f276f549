import { settlesWithin } from '@kvroute/platform';
import { Cluster, Redis, type ClusterOptions, type DNSLookupFunction, type RedisOptions } from 'ioredis';
import type { RedisClient } from './scripts';

/**
 * Who uses the connection, which decides what it does when Redis is slow or away:
 *
 * - `request-path`: the router's routing state, read and written while a client waits for its first
 *   token. Routing state is an optimisation (a request routed without it still gets an answer), so a
 *   slow or absent Redis must cost a request a few tens of ms, not seconds: every command times out
 *   after `commandTimeoutMs` (50 ms), commands issued while disconnected fail at once instead of
 *   queueing (no offline queue), and a command cut off by a dropped connection is not resent
 *   (`maxRetriesPerRequest: 0`). The caller falls back (e.g. routes without shared state) and the
 *   client reconnects in the background with capped exponential backoff (50 ms doubling to 2 s).
 * - `worker`: background jobs (health polling, BullMQ) that have no one waiting: commands wait for the
 *   connection to come back (offline queue on, `maxRetriesPerRequest: null`, as BullMQ requires, no
 *   command timeout), reconnecting with capped backoff (200 ms steps to 5 s).
 *
 * On a Redis Cluster (a `redis+cluster://` URL) the same split holds; `clusterOptionsFor` says how.
 */
export type RedisRole = 'request-path' | 'worker';

export interface CreateRedisOptions {
  /** Request-path command timeout (default 50 ms). Raise it for Redis behind a slow network. */
  readonly commandTimeoutMs?: number;
  /**
   * Connection errors (ioredis emits them on every failed reconnect; without a listener it prints them).
   * On a cluster also each node's (`node error`): a node away is where a failover starts.
   */
  readonly onError?: (error: Error) => void;
  /** Extra ioredis options, applied last (tests, TLS, a connection name); on a cluster, to every node's connection. */
  readonly overrides?: RedisOptions;
}

export const REQUEST_PATH_COMMAND_TIMEOUT_MS = 50;

/** Reconnect delay after the `attempt`-th failure: `stepMs · 2^(attempt−1)`, capped. */
export function reconnectDelayMs(attempt: number, stepMs: number, capMs: number): number {
  return Math.min(capMs, stepMs * 2 ** Math.min(Math.max(attempt - 1, 0), 16));
}

export function redisOptionsFor(role: RedisRole, options: CreateRedisOptions = {}): RedisOptions {
  const roleOptions: RedisOptions =
    role === 'request-path'
      ? {
          commandTimeout: options.commandTimeoutMs ?? REQUEST_PATH_COMMAND_TIMEOUT_MS,
          enableOfflineQueue: false,
          maxRetriesPerRequest: 0,
          connectTimeout: 1000,
          retryStrategy: (attempt) => reconnectDelayMs(attempt, 50, 2000),
        }
      : {
          enableOfflineQueue: true,
          maxRetriesPerRequest: null,
          connectTimeout: 10_000,
          retryStrategy: (attempt) => Math.min(attempt * 200, 5000),
        };
  return { keepAlive: 10_000, connectionName: `kvroute-${role}`, ...roleOptions, ...options.overrides };
}

/**
 * A Redis Cluster as a URL: `redis+cluster://[user:password@]host:port,host:port,…` (`rediss+cluster://`
 * for TLS). The hosts are seeds: the client asks them for the slot map and then talks to every master
 * the map names, so a few of the masters are enough. A port left out is 6379; no database (a cluster
 * has only 0), no query. The parsed URL is never logged nor put in an error message: it may hold a password.
 */
export interface ClusterUrl {
  readonly tls: boolean;
  /** At least one; in the URL's order. IPv6 hosts without their brackets. */
  readonly nodes: ReadonlyArray<RedisNodeAddress>;
  /** Percent-decoded, as in a redis:// URL; undefined when the URL has none. */
  readonly username: string | undefined;
  readonly password: string | undefined;
}

export interface RedisNodeAddress {
  readonly host: string;
  readonly port: number;
}

const CLUSTER_SCHEME = /^(rediss?)\+cluster:\/\//i;
/** DNS names as resolvers take them, underscores included (Docker Compose service names have them). */
const HOST_NAME = /^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*\.?$/i;
const IPV6_IN_BRACKETS = /^\[([0-9a-f:.]+)\]$/i;
const DEFAULT_PORT = 6379;

/** Whether `url` names a Redis Cluster (`redis+cluster://`, `rediss+cluster://`) rather than one server. */
export function isClusterUrl(url: string): boolean {
  return CLUSTER_SCHEME.test(url);
}

/**
 * Parses a cluster URL (see ClusterUrl). Throws a RangeError saying what is wrong with it, without
 * quoting any of it. The userinfo ends at the last `@`, so a password with an unencoded `@` or `/`
 * still parses; `%` escapes are decoded as in any URL.
 */
export function parseClusterUrl(url: string): ClusterUrl {
  const scheme = CLUSTER_SCHEME.exec(url);
  if (!scheme) throw clusterUrlError('it does not start with redis+cluster:// or rediss+cluster://');
  const rest = url.slice(scheme[0].length);
  const at = rest.lastIndexOf('@');
  const userinfo = at < 0 ? null : rest.slice(0, at);
  const afterUserinfo = at < 0 ? rest : rest.slice(at + 1);
  const end = afterUserinfo.search(/[/?#]/);
  const hostList = end < 0 ? afterUserinfo : afterUserinfo.slice(0, end);
  const tail = end < 0 ? '' : afterUserinfo.slice(end);
  if (tail !== '' && tail !== '/' && tail !== '/0')
    throw clusterUrlError(
      'it has a path, query or fragment (a cluster has one database, 0, and takes no options in the URL)',
    );

  let username: string | undefined;
  let password: string | undefined;
  if (userinfo !== null) {
    const colon = userinfo.indexOf(':');
    const rawUser = colon < 0 ? userinfo : userinfo.slice(0, colon);
    const rawPassword = colon < 0 ? '' : userinfo.slice(colon + 1);
    try {
      username = rawUser === '' ? undefined : decodeURIComponent(rawUser);
      password = rawPassword === '' ? undefined : decodeURIComponent(rawPassword);
    } catch {
      throw clusterUrlError('its user or password has a malformed % escape');
    }
  }

  if (hostList === '') throw clusterUrlError('it names no node');
  const nodes = hostList.split(',').map((entry, index) => parseNode(entry.trim(), index + 1));
  return { tls: scheme[1]?.toLowerCase() === 'rediss', nodes, username, password };
}

function parseNode(entry: string, position: number): RedisNodeAddress {
  if (entry === '') throw clusterUrlError(`node ${position} is empty`);
  // `[v6]` or `[v6]:port`, else `host` or `host:port` (a bare v6 address would be ambiguous).
  const close = entry.startsWith('[') ? entry.indexOf(']') : -1;
  const colon = close >= 0 ? entry.indexOf(':', close) : entry.lastIndexOf(':');
  const hostPart = colon < 0 ? entry : entry.slice(0, colon);
  const portPart = colon < 0 ? null : entry.slice(colon + 1);
  const v6 = IPV6_IN_BRACKETS.exec(hostPart);
  const host = v6 ? (v6[1] as string) : hostPart;
  if (!v6 && !HOST_NAME.test(host))
    throw clusterUrlError(`node ${position} has no valid host (a name, an IPv4 address or an [IPv6] address)`);
  const port = portPart === null ? DEFAULT_PORT : /^\d{1,5}$/.test(portPart) ? Number(portPart) : Number.NaN;
  if (!(port >= 1 && port <= 65_535)) throw clusterUrlError(`node ${position} has no valid port (1..65535)`);
  return { host: host.toLowerCase(), port };
}

function clusterUrlError(why: string): RangeError {
  return new RangeError(`Redis Cluster URL: ${why}; the form is redis+cluster://[user:password@]host:port,host:port,…`);
}

/**
 * The host:port pairs a Redis URL names: one for `redis://` and `rediss://` (port 6379 unless given),
 * the seeds of a cluster URL; empty if it does not parse. No credentials. For the router's backend
 * address policy, which refuses a backend that is its own Redis.
 */
export function redisUrlNodes(url: string): RedisNodeAddress[] {
  if (isClusterUrl(url)) {
    try {
      return [...parseClusterUrl(url).nodes];
    } catch {
      return [];
    }
  }
  try {
    const parsed = new URL(url);
    const port = parsed.port === '' ? DEFAULT_PORT : Number(parsed.port);
    return [{ host: parsed.hostname.replace(/^\[|\]$/g, '').toLowerCase(), port }];
  } catch {
    return [];
  }
}

/**
 * Cluster-level settings per role. Redirections (MOVED, ASK) and retries after a node dropped out or
 * the cluster said CLUSTERDOWN/TRYAGAIN are resent by the client, each retry after the delay:
 * - `request-path`: a few quick ones (4 tries, 10 ms apart): a redirection after a failover or a
 *   reshard is one round trip, and the command timeout (which runs from the first send, across the
 *   retries) still bounds the whole call, so the caller falls back as on a single Redis.
 * - `worker`: enough to ride out a failover (64 tries, 500 ms apart: ~30 s, beyond the default
 *   `cluster-node-timeout` of 15 s plus an election), so background work waits as it does for a
 *   single Redis restarting. No ready check (CLUSTER INFO before 'ready'): while a master is failing
 *   over it says `cluster_state:fail`, and ioredis then reconnects with a fresh internal connect()
 *   and never settles the connect() promise it was called with. BullMQ's worker awaits exactly that
 *   one when its blocking-command watchdog resets the blocking connection mid-failover, and its fetch
 *   loop stayed parked for good (the poller stopped scraping; apps/router/test/redis-cluster-failover
 *   .test.ts). Without it, commands go out once the slot map is read and a CLUSTERDOWN reply is
 *   retried like a redirection, so background work still waits out the failover.
 * `slotsRefreshTimeout` bounds each CLUSTER SLOTS asked of one node, so a hung node delays a refresh
 * by that much before the next node is asked.
 */
const CLUSTER_ROLE_OPTIONS: Record<RedisRole, ClusterOptions> = {
  'request-path': {
    maxRedirections: 4,
    retryDelayOnFailover: 10,
    retryDelayOnClusterDown: 10,
    retryDelayOnTryAgain: 10,
    slotsRefreshTimeout: 1000,
  },
  worker: {
    maxRedirections: 64,
    retryDelayOnFailover: 500,
    retryDelayOnClusterDown: 500,
    retryDelayOnTryAgain: 100,
    slotsRefreshTimeout: 2000,
    enableReadyCheck: false,
  },
};

/**
 * The ioredis Cluster options of `role` for `url`: the role's connection options (`redisOptionsFor`,
 * overrides included) go to every node's connection (`redisOptions`: command and connect timeouts,
 * keep-alive, connection name, `maxRetriesPerRequest`, which BullMQ reads there), with the URL's
 * credentials and TLS; the role's offline queue and reconnect strategy apply to the cluster as a
 * whole (a node's own connection never reconnects: the client follows the slot map to its successor).
 * Reads go to masters only (`scaleReads: 'master'`): a replica lags, and routing state read from one
 * could miss the lease or ownership just written.
 */
export function clusterOptionsFor(role: RedisRole, url: ClusterUrl, options: CreateRedisOptions = {}): ClusterOptions {
  const nodeOptions: RedisOptions = { ...redisOptionsFor(role, options) };
  const enableOfflineQueue = nodeOptions.enableOfflineQueue ?? true;
  const retryStrategy = nodeOptions.retryStrategy;
  // What a node connection must not set itself: the cluster owns addressing, queueing and reconnection.
  for (const owned of ['host', 'port', 'path', 'sentinels', 'retryStrategy', 'enableOfflineQueue', 'readOnly'] as const)
    delete nodeOptions[owned];
  if (url.username !== undefined) nodeOptions.username = url.username;
  if (url.password !== undefined) nodeOptions.password = url.password;
  if (url.tls) nodeOptions.tls = nodeOptions.tls ?? {};
  return {
    ...CLUSTER_ROLE_OPTIONS[role],
    redisOptions: nodeOptions,
    enableOfflineQueue,
    clusterRetryStrategy: (attempt) => retryStrategy?.(attempt) ?? null,
    scaleReads: 'master',
    // With TLS the seeds are dialled by the names given, so each certificate is checked against them
    // (ioredis would otherwise resolve them to IP addresses first).
    ...(url.tls ? { dnsLookup: keepHostName } : {}),
  };
}

const keepHostName: DNSLookupFunction = (hostname, callback) => callback(null, hostname);

/**
 * A Redis connection for `role` (see RedisRole): a single server for `redis://` and `rediss://` URLs,
 * a Cluster client for `redis+cluster://` and `rediss+cluster://` ones (see ClusterUrl). It connects
 * at once; a request-path connection refuses commands until it is ready, so await `waitUntilReady`
 * before serving. The caller closes it (`quitRedis`). Both kinds run every command of this package:
 * each script's keys share one hash tag, so it runs on one shard (keys.ts).
 */
export function createRedis(url: string, role: RedisRole, options: CreateRedisOptions = {}): RedisClient {
  const onError = (error: Error): void => options.onError?.(error);
  if (isClusterUrl(url)) {
    const parsed = parseClusterUrl(url);
    const cluster = new Cluster(
      parsed.nodes.map((node) => ({ host: node.host, port: node.port })),
      clusterOptionsFor(role, parsed, options),
    );
    cluster.on('error', onError);
    cluster.on('node error', onError);
    return cluster;
  }
  const redis = new Redis(url, redisOptionsFor(role, options));
  redis.on('error', onError);
  return redis;
}

/**
 * Closes a connection: QUIT (on a cluster, to every node), so the replies to commands already sent
 * arrive first, but never waiting more than `timeoutMs` for a Redis that is away; then the sockets are
 * closed either way.
 */
export async function quitRedis(redis: RedisClient, timeoutMs = 1000): Promise<void> {
  await settlesWithin(redis.quit(), timeoutMs);
  redis.disconnect();
}

/**
 * Resolves once the connection is ready (a cluster: its slot map read and, for `request-path`, CLUSTER INFO saying ok);
 * rejects after `timeoutMs` (the connection keeps trying).
 */
export function waitUntilReady(redis: RedisClient, timeoutMs = 5000): Promise<void> {
  if (redis.status === 'ready') return Promise.resolve();
  return new Promise((resolve, reject) => {
    const onReady = (): void => {
      clearTimeout(timer);
      resolve();
    };
    const timer = setTimeout(() => {
      redis.off('ready', onReady);
      reject(new Error(`Redis was not ready within ${timeoutMs} ms (status ${redis.status})`));
    }, timeoutMs);
    redis.once('ready', onReady);
  });
}
