import { Cluster, type Redis } from 'ioredis';
import { DEFAULT_KEY_NAMESPACE, KEY_SUFFIX } from './keys';
import type { RedisClient } from './scripts';

/** Hash tags of keys that are not a pool's: the fleet's (backend set, poller states) and the poller's BullMQ queue. */
const NON_POOL_TAGS = ['{fleet}', '{poller}'];
const POOL_SUFFIXES = Object.values(KEY_SUFFIX);

/** True for `<namespace>:{<tag>}:<pool suffix>…` keys (see keys.ts), whatever the pool. */
export function isPoolKey(key: string, namespace: string = DEFAULT_KEY_NAMESPACE): boolean {
  if (!key.startsWith(`${namespace}:{`)) return false;
  const tagEnd = key.indexOf('}:', namespace.length + 2);
  if (tagEnd < 0) return false;
  const tag = key.slice(namespace.length + 1, tagEnd + 1);
  if (NON_POOL_TAGS.includes(tag)) return false;
  const suffix = key.slice(tagEnd + 2);
  return POOL_SUFFIXES.some((known) => (known.endsWith(':') ? suffix.startsWith(known) : suffix === known));
}

/**
 * Deletes every pool's routing state (owner index, leases, in-flight and prefill figures) in
 * `namespace`, keeping everything else: the fleet's keys (backend set, health poller states), the
 * poller's BullMQ queue, other namespaces. For benchmarks that start each run with cold caches on a
 * Redis the pollers keep using. Not for a live fleet: routers running meanwhile would lose their
 * in-flight counts. Returns how many keys went. On a cluster, SCAN sees one node's keys only, so
 * every master is scanned; each key is unlinked through the cluster client, which sends it to its slot's
 * master (one key per UNLINK: pool keys sit in different slots).
 */
export async function clearPoolState(redis: RedisClient, namespace: string = DEFAULT_KEY_NAMESPACE): Promise<number> {
  const scanned: Redis[] = redis instanceof Cluster ? redis.nodes('master') : [redis];
  let deleted = 0;
  for (const node of scanned) {
    let cursor = '0';
    do {
      const [next, keys] = await node.scan(cursor, 'MATCH', `${namespace}:*`, 'COUNT', 1000);
      cursor = next;
      for (const key of keys.filter((candidate) => isPoolKey(candidate, namespace))) deleted += await redis.unlink(key);
    } while (cursor !== '0');
  }
  return deleted;
}
