import { existsSync } from 'node:fs';
import { Cluster, Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLUSTER_SLOT_COUNT, clusterKeySlot } from './cluster-key-slot';
import { pingRedis } from './local-redis-server';
import { startRedisCluster, type RedisClusterNode, type TestRedisCluster } from './start-redis-cluster';
import { uniqueKeyPrefix } from './unique-key-prefix';

/** Short node timeout: the failover test waits about this long before the replica may take over. */
const NODE_TIMEOUT_MS = 2_000;
/** Bound on a failover: node timeout, FAIL agreement, the replica's election delay (≤ 1 s), slack for a loaded machine. */
const FAILOVER_BOUND_MS = NODE_TIMEOUT_MS + 10_000;

let redisCluster: TestRedisCluster;
const logLines: string[] = [];
const clients: Array<Redis | Cluster> = [];

/** A client of one node that fails fast instead of reconnecting or following redirects, so MOVED shows up as an error. */
function nodeClient(port: number): Redis {
  const client = new Redis({
    host: '127.0.0.1',
    port,
    lazyConnect: true,
    retryStrategy: () => null,
    maxRetriesPerRequest: 0,
    connectTimeout: 1_000,
  });
  clients.push(client);
  return client;
}

async function connectedNodeClient(port: number): Promise<Redis> {
  const client = nodeClient(port);
  await client.connect();
  return client;
}

function clusterClient(): Cluster {
  const client = new Cluster(redisCluster.seeds, { redisOptions: { connectTimeout: 1_000 } });
  clients.push(client);
  return client;
}

/** ROLE of a replica: the port of the master it replicates and its link state. */
async function replicaLink(port: number): Promise<{ masterPort: number; link: string }> {
  const role = await (await connectedNodeClient(port)).role();
  expect(role[0]).toBe('slave');
  return { masterPort: Number(role[2]), link: String(role[3]) };
}

const withRole = (role: RedisClusterNode['role']): RedisClusterNode[] =>
  redisCluster.nodes.filter((node) => node.role === role && node.running);

beforeAll(async () => {
  redisCluster = await startRedisCluster({ nodeTimeoutMs: NODE_TIMEOUT_MS, logger: (line) => logLines.push(line) });
  console.info(`start-redis-cluster.test: ${logLines.join(' | ')}`);
}, 30_000);

afterAll(async () => {
  for (const client of clients.splice(0)) client.disconnect();
  await redisCluster?.stop();
}, 15_000);

describe('startRedisCluster', () => {
  it('forms 3 masters and 3 replicas, one replica per master, every node ok, and logs one line saying why local', async () => {
    const masters = withRole('master');
    const replicas = withRole('replica');
    expect(redisCluster.nodes).toHaveLength(6);
    expect(masters).toHaveLength(3);
    expect(replicas).toHaveLength(3);
    expect(new Set(redisCluster.nodes.map((node) => node.port)).size).toBe(6);
    expect(redisCluster.url).toBe(`redis+cluster://${masters.map((node) => `127.0.0.1:${node.port}`).join(',')}`);
    expect(redisCluster.seeds).toEqual(redisCluster.nodes.map((node) => ({ host: '127.0.0.1', port: node.port })));

    const links = await Promise.all(replicas.map((replica) => replicaLink(replica.port)));
    expect(links.every((link) => link.link === 'connected')).toBe(true);
    expect(new Set(links.map((link) => link.masterPort))).toEqual(new Set(masters.map((node) => node.port)));

    for (const node of redisCluster.nodes) {
      const info = await (await connectedNodeClient(node.port)).cluster('INFO');
      expect(info).toContain('cluster_state:ok');
      expect(info).toContain(`cluster_slots_assigned:${CLUSTER_SLOT_COUNT}`);
    }

    expect(logLines).toHaveLength(1);
    expect(logLines[0]).toMatch(
      /^\[testing\] Redis Cluster: 3 masters \+ 3 replicas of local redis-server \(.*\/_ping.*\)$/,
    );
  }, 10_000);

  it('computes key slots as Redis does (hash tags included) and masterOf names the node that serves them', async () => {
    // 0x31c3 is the published CRC16/XMODEM check value of "123456789".
    expect(clusterKeySlot('123456789')).toBe(0x31c3);
    const prefix = uniqueKeyPrefix('cluster slots');
    const keys = [
      '',
      'a',
      '{user1000}.following',
      '{user1000}.followers',
      'foo{}{bar}',
      'foo{{bar}}zap',
      'foo{bar}{zap}',
      '{',
      '}{x}',
      'ключ{Ω}',
      '🔑',
    ];
    for (let index = 0; index < 20; index++) keys.push(`${prefix}:${index}`);

    const anyNode = await connectedNodeClient(redisCluster.nodes[0]!.port);
    for (const key of keys) {
      const slot = clusterKeySlot(key);
      expect(slot, key).toBe(await anyNode.cluster('KEYSLOT', key));
      expect(redisCluster.masterOf(key)).toBe(redisCluster.masterOf(slot));
    }
    expect(clusterKeySlot('{user1000}.following')).toBe(clusterKeySlot('{user1000}.followers'));

    const key = `${prefix}:owned`;
    const owner = redisCluster.masterOf(key);
    expect(owner.role).toBe('master');
    expect(await (await connectedNodeClient(owner.port)).set(key, 'direct')).toBe('OK');
    const other = withRole('master').find((node) => node.port !== owner.port)!;
    await expect((await connectedNodeClient(other.port)).get(key)).rejects.toThrow(
      `MOVED ${clusterKeySlot(key)} 127.0.0.1:${owner.port}`,
    );
    expect(() => redisCluster.masterOf(CLUSTER_SLOT_COUNT)).toThrow(RangeError);
  }, 10_000);

  it('an ioredis Cluster client SETs and GETs keys in slots of every master', async () => {
    const prefix = uniqueKeyPrefix('cluster set get');
    const keys = Array.from({ length: 30 }, (_, index) => `${prefix}:${index}`);
    expect(new Set(keys.map((key) => clusterKeySlot(key))).size).toBeGreaterThan(20);
    expect(new Set(keys.map((key) => redisCluster.masterOf(key).port))).toEqual(
      new Set(withRole('master').map((node) => node.port)),
    );

    const cluster = clusterClient();
    for (const key of keys) expect(await cluster.set(key, `value of ${key}`)).toBe('OK');
    for (const key of keys) expect(await cluster.get(key)).toBe(`value of ${key}`);
    // Each value is on the master masterOf names: a plain client of that node reads it without a redirect.
    for (const key of keys)
      expect(await (await connectedNodeClient(redisCluster.masterOf(key).port)).get(key)).toBe(`value of ${key}`);
  }, 10_000);

  it('keys sharing a hash tag land in one slot on one master; keys without one cannot be written together', async () => {
    const prefix = uniqueKeyPrefix('cluster hash tag');
    const tag = `{${prefix}:tenant}`;
    const tagged = [`${tag}:a`, `${tag}:b`, `${tag}:c`];
    const slot = clusterKeySlot(tagged[0]!);
    const master = redisCluster.masterOf(tagged[0]!);
    for (const key of tagged) {
      expect(clusterKeySlot(key)).toBe(slot);
      expect(redisCluster.masterOf(key)).toBe(master);
    }

    const cluster = clusterClient();
    expect(await cluster.mset(tagged[0]!, '1', tagged[1]!, '2', tagged[2]!, '3')).toBe('OK');
    const owner = await connectedNodeClient(master.port);
    expect(await owner.cluster('KEYSLOT', tagged[1]!)).toBe(slot);
    expect(await owner.cluster('COUNTKEYSINSLOT', slot)).toBe(3);
    expect(await owner.mget(...tagged)).toEqual(['1', '2', '3']);

    const first = `${prefix}:x`;
    const elsewhere = Array.from({ length: 10 }, (_, index) => `${prefix}:y${index}`).find(
      (key) => clusterKeySlot(key) !== clusterKeySlot(first),
    )!;
    await expect(cluster.mset(first, '1', elsewhere, '2')).rejects.toThrow(/CROSSSLOT/);
  }, 10_000);

  it('killing a master gets its replica promoted within the node timeout plus a bound; the old master rejoins as a replica', async () => {
    const key = `${uniqueKeyPrefix('cluster failover')}:key`;
    const cluster = clusterClient();
    expect(await cluster.set(key, 'before')).toBe('OK');
    const victim = redisCluster.masterOf(key);
    const replicas = withRole('replica');
    const links = await Promise.all(replicas.map((replica) => replicaLink(replica.port)));
    const heir = replicas[links.findIndex((link) => link.masterPort === victim.port)]!;
    expect(heir).toBeDefined();
    // WAIT: the write reached the replica before the kill, so it must survive the failover.
    expect(await (await connectedNodeClient(victim.port)).call('WAIT', '1', '1000')).toBe(1);

    const killedAt = Date.now();
    await redisCluster.killNode(victim.port);
    expect(victim.running).toBe(false);
    expect(await pingRedis(victim.port)).toBe(false);

    await redisCluster.waitForClusterOk(FAILOVER_BOUND_MS);
    const failoverMs = Date.now() - killedAt;
    console.info(
      `start-redis-cluster.test: port ${heir.port} took over from killed master ${victim.port} after ${failoverMs} ms`,
    );
    expect(failoverMs).toBeLessThan(FAILOVER_BOUND_MS + 2_000);
    expect(redisCluster.masterOf(key)).toBe(heir);
    expect(heir.role).toBe('master');
    expect(withRole('master')).toHaveLength(3);
    expect(redisCluster.url).not.toContain(`:${victim.port}`);
    for (const node of redisCluster.nodes.filter((candidate) => candidate.running)) {
      expect(await (await connectedNodeClient(node.port)).cluster('INFO')).toContain('cluster_state:ok');
    }

    expect(await cluster.get(key)).toBe('before');
    expect(await cluster.set(key, 'after')).toBe('OK');
    expect(await (await connectedNodeClient(heir.port)).get(key)).toBe('after');

    await redisCluster.restartNode(victim.port);
    await redisCluster.waitForClusterOk(10_000);
    expect(victim.running).toBe(true);
    expect(victim.role).toBe('replica');
    expect(await replicaLink(victim.port)).toEqual({ masterPort: heir.port, link: 'connected' });
    expect(withRole('master')).toHaveLength(3);
    expect(withRole('replica')).toHaveLength(3);
  }, 25_000);

  it('stop() stops every node and removes the temp dir, and is idempotent', async () => {
    for (const client of clients.splice(0)) client.disconnect();
    const ports = redisCluster.nodes.map((node) => node.port);
    expect(existsSync(redisCluster.dir)).toBe(true);
    await Promise.all([redisCluster.stop(), redisCluster.stop()]);
    await redisCluster.stop();
    expect(await Promise.all(ports.map((port) => pingRedis(port)))).toEqual(ports.map(() => false));
    expect(redisCluster.nodes.every((node) => !node.running)).toBe(true);
    expect(existsSync(redisCluster.dir)).toBe(false);
    await expect(redisCluster.killNode(ports[0]!)).rejects.toThrow(/after stop/);
  }, 10_000);
});
