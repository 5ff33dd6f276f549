import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { createRedis, fleetKeys, waitUntilReady } from '@kvroute/redis-store';
import { startRedis, type TestRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { startLoopbackDns, type LoopbackDns } from './loopback-dns';
import { waitFor } from './start-test-cluster';
import { chat as chatOnce, longStream as streamLong } from './chat-requests';

/**
 * Acceptance 3 of issue 16: backends discovered from a headless Service's SRV records, on a real DNS
 * server on loopback (dns2), by two router replicas sharing one Redis. Records added and removed →
 * both replicas' backend sets follow within a refresh, and traffic drains from a removed backend
 * without errors: a client load running throughout sees only 200s, the removed backend's streams in
 * flight finish, and it gets no new request once the change has reached the replicas.
 */
const MODEL = 'test-model';
const SERVICE = '_http._tcp.vllm.kvroute.test';
/** Short, so the test is quick; the default is 5 s. */
const REFRESH_MS = 200;
/** How long a removed record's backend stays drained before it is removed from the set. */
const REMOVE_AFTER_MS = 2_000;

interface Sim {
  readonly sim: SimServer;
  readonly url: string;
  readonly port: number;
  /** Its SRV target name. */
  readonly target: string;
  /** Its id in the discovered set. */
  readonly id: string;
}

async function startSim(index: number): Promise<Sim> {
  // Real-time A100 timing: a 400-token stream runs ~4 s, a 2-token request ~30 ms.
  const sim = await createSimServer(SimConfig.parse({ port: 0, profile: 'a100-7b', model: MODEL, logLevel: 'silent' }));
  const url = await sim.listen();
  const port = Number(new URL(url).port);
  return { sim, url, port, target: `pod-${index}.vllm.kvroute.test`, id: `vllm@127.0.0.1:${port}` };
}

/** Requests a backend has received (admitted by its engine). */
const received = (sim: Sim): number => sim.sim.engine.stats.requestParamsMaxTokens.count;
const poolIds = (router: RouterServer): string[] => router.registry.poolFor(MODEL).map((backend) => backend.id);
const setIds = (router: RouterServer): string[] => router.registry.backends.map((backend) => backend.id).sort();

const chat = (baseUrl: string) => chatOnce(baseUrl, MODEL);
const longStream = (baseUrl: string) => streamLong(baseUrl, MODEL);

/** A client load over both replicas until stopped: every status seen, and the backends that answered. */
function startLoad(
  urls: readonly string[],
  concurrency: number,
): {
  stop(): Promise<{ statuses: Map<number, number>; backends: Set<string> }>;
  /** Resolves once every request in flight when called has ended (each worker has sent a newer one). */
  settled(): Promise<void>;
} {
  let running = true;
  const statuses = new Map<number, number>();
  const backends = new Set<string>();
  /** Per worker: how many requests it has sent. */
  const sent = new Array<number>(concurrency).fill(0);
  const workers = Array.from({ length: concurrency }, async (_, worker) => {
    let turn = worker;
    while (running) {
      sent[worker] = (sent[worker] ?? 0) + 1;
      const result = await chat(urls[turn++ % urls.length] as string).catch(() => ({ status: 0, backend: null }));
      statuses.set(result.status, (statuses.get(result.status) ?? 0) + 1);
      if (result.backend !== null) backends.add(result.backend);
    }
  });
  return {
    async settled() {
      const at = [...sent];
      await waitFor(() => sent.every((count, worker) => count > (at[worker] ?? 0)), 10_000);
    },
    async stop() {
      running = false;
      await Promise.all(workers);
      return { statuses, backends };
    },
  };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('DNS discovery (SRV) with two replicas on one Redis', () => {
  let redis: TestRedis;
  let dns: LoopbackDns;
  let sims: Sim[];
  let routers: RouterServer[];
  let urls: string[];

  const publish = (members: readonly Sim[]): void => {
    dns.zone.srv.set(
      SERVICE,
      members.map((sim) => ({ target: sim.target, port: sim.port })),
    );
  };

  beforeAll(async () => {
    redis = await startRedis({ fresh: true });
    dns = await startLoopbackDns();
    sims = await Promise.all([0, 1, 2].map((index) => startSim(index)));
    for (const sim of sims) dns.zone.a.set(sim.target, ['127.0.0.1']);
    publish(sims.slice(0, 2));
    routers = [];
    urls = [];
    for (let index = 0; index < 2; index++) {
      const router = await createRouterServer(
        RouterConfig.parse({
          host: '127.0.0.1',
          port: 0,
          opsPort: 0,
          discovery: `dns+srv://${SERVICE}`,
          discoveryDnsServers: [dns.server],
          discoveryRefreshMs: REFRESH_MS,
          discoveryRemoveAfterMs: REMOVE_AFTER_MS,
          discoveryDnsTimeoutMs: 300,
          policy: 'roundrobin',
          redisUrl: redis.url,
          redisTimeoutMs: 200,
          retryBackoffMs: 1,
          backendSetPollMs: 100,
        }),
      );
      routers.push(router);
      urls.push(await router.listen());
    }
  });
  afterAll(async () => {
    for (const router of routers ?? []) await router.close();
    await Promise.all((sims ?? []).map((sim) => sim.sim.close()));
    await dns?.close();
    await redis?.stop();
  });

  it('starts with the backends the records name, on every replica', async () => {
    const expected = sims
      .slice(0, 2)
      .map((sim) => sim.id)
      .sort();
    for (const router of routers) expect(setIds(router)).toEqual(expected);
    // Models are read from each backend's GET /v1/models once it is added.
    await waitFor(() => routers.every((router) => poolIds(router).length === 2), 3_000);
    for (const url of urls) expect((await chat(url)).status).toBe(200);
  });

  it('does not rewrite the shared set while the records stay the same (one replica applies; no flapping)', async () => {
    const version = async (): Promise<number> => {
      const connection = createRedis(redis.url, 'request-path', { commandTimeoutMs: 5_000 });
      try {
        await waitUntilReady(connection);
        return Number(await connection.get(fleetKeys().version));
      } finally {
        connection.disconnect();
      }
    };
    const before = await version();
    await sleep(REFRESH_MS * 5);
    expect(await version()).toBe(before);
  });

  it('a record added → both replicas route to the new backend within a refresh', async () => {
    const added = sims[2] as Sim;
    const load = startLoad(urls, 4);
    const started = performance.now();
    publish(sims);
    await waitFor(() => routers.every((router) => poolIds(router).includes(added.id)), REFRESH_MS * 10);
    const followedMs = performance.now() - started;
    console.info(
      `record added: in both replicas' pools after ${followedMs.toFixed(0)} ms (refresh every ${REFRESH_MS} ms, then the backend's /v1/models)`,
    );
    await waitFor(() => received(added) > 0, 3_000);
    const { statuses } = await load.stop();
    expect([...statuses.keys()]).toEqual([200]);
  });

  it('a record removed → the backend drains: no errors under load, its streams finish, no new requests reach it', async () => {
    const removed = sims[1] as Sim;
    // Streams on the backend about to go: each runs ~4 s, well past the change.
    const streams: Array<Awaited<ReturnType<typeof longStream>>> = [];
    for (let attempt = 0; streams.length < 2 && attempt < 40; attempt++) {
      const stream = await longStream(urls[attempt % 2] as string);
      if (stream.backend === removed.id) streams.push(stream);
      else void stream.done;
    }
    expect(streams).toHaveLength(2);
    const load = startLoad(urls, 4);
    await sleep(REFRESH_MS);
    publish([sims[0] as Sim, sims[2] as Sim]);
    const changedAt = performance.now();
    await waitFor(() => routers.every((router) => !poolIds(router).includes(removed.id)), REFRESH_MS * 10);
    const drainedAt = performance.now();
    console.info(`record removed: out of both replicas' pools after ${(drainedAt - changedAt).toFixed(0)} ms`);
    // A request routed just before the drain may reach the engine just after it (a busy machine delays its send):
    // counted once those have ended, so only a request routed after the drain could raise the count.
    await load.settled();
    const receivedAtDrain = received(removed);
    // The load goes on for several refreshes: not one request more reaches the drained backend.
    await sleep(REFRESH_MS * 5);
    const { statuses, backends } = await load.stop();
    expect(received(removed)).toBe(receivedAtDrain);
    expect([...statuses.keys()]).toEqual([200]);
    expect(backends).toContain((sims[0] as Sim).id);
    expect(backends).toContain((sims[2] as Sim).id);
    for (const stream of streams) {
      const result = await stream.done;
      expect(result.status).toBe(200);
      expect(result.text).toContain('"finish_reason":"length"');
      expect(result.text.trimEnd().endsWith('data: [DONE]')).toBe(true);
      expect(result.text).not.toContain('ROUTER_ERR_');
      // Still streaming when the drain had reached both replicas.
      expect(result.endedAtMs).toBeGreaterThan(drainedAt);
    }
    // Drained, then removed from the set once `discoveryRemoveAfterMs` has passed.
    for (const router of routers)
      expect(router.registry.isDrained(removed.id) || router.registry.get(removed.id) === undefined).toBe(true);
    await waitFor(
      () => routers.every((router) => router.registry.get(removed.id) === undefined),
      REMOVE_AFTER_MS + REFRESH_MS * 10,
    );
  });

  it('a failing DNS server (SERVFAIL, then no answer) removes nothing and is counted', async () => {
    const before = routers.map(setIds);
    dns.mode = 'servfail';
    await sleep(REFRESH_MS * 4);
    dns.mode = 'silent';
    await sleep(REFRESH_MS * 4 + 300);
    expect(routers.map(setIds)).toEqual(before);
    expect(routers.every((router) => poolIds(router).length === 2)).toBe(true);
    for (const url of urls) expect((await chat(url)).status).toBe(200);
    const metrics = await (await fetch(`${routers[0]?.opsUrl}/metrics`)).text();
    const failures = Number(
      /kvroute_router_discovery_failures_total\{source="dns\+srv"\} (\d+)/.exec(metrics)?.[1] ?? 0,
    );
    expect(failures).toBeGreaterThanOrEqual(2);
    dns.mode = 'records';
  });

  it('an empty answer (NXDOMAIN) drains every discovered backend; records back → undrained', async () => {
    const saved = dns.zone.srv.get(SERVICE);
    dns.zone.srv.delete(SERVICE);
    await waitFor(() => routers.every((router) => poolIds(router).length === 0), REFRESH_MS * 10);
    const refused = await chat(urls[0] as string);
    expect(refused.status).toBe(503);
    dns.zone.srv.set(SERVICE, saved ?? []);
    await waitFor(() => routers.every((router) => poolIds(router).length === 2), REFRESH_MS * 10);
    for (const url of urls) expect((await chat(url)).status).toBe(200);
  });

  it('when the replica applying the changes stops, the other takes over', async () => {
    const connection = createRedis(redis.url, 'request-path', { commandTimeoutMs: 5_000 });
    // Which replica leads is not fixed: a source failing for the lease's TTL (the SERVFAIL case above)
    // hands the lease to whichever replica's source answers first. Each replica says whether it leads.
    const leads = async (router: RouterServer) =>
      /kvroute_router_discovery_leader\{source="dns\+srv"\} 1/.test(
        await (await fetch(`${router.opsUrl}/metrics`)).text(),
      );
    let leading: boolean[] = [];
    // A replica learns it lost the lease at its next refresh: until then two may say they lead.
    await waitFor(
      async () => (leading = await Promise.all(routers.map(leads))).filter(Boolean).length === 1,
      REFRESH_MS * 10,
    );
    const leaderIndex = leading.indexOf(true);
    const leader = routers[leaderIndex] as RouterServer;
    const other = routers[1 - leaderIndex] as RouterServer;
    try {
      await waitUntilReady(connection);
      const leaseKey = 'kvr:v1:discovery-lease:vllm';
      const holder = await connection.get(leaseKey);
      expect(holder).not.toBeNull();
      await leader.close();
      const added = sims[1] as Sim;
      publish(sims);
      // The lease is given up on close: the other replica takes it and applies the next answer.
      await waitFor(() => poolIds(other).includes(added.id), REFRESH_MS * 20);
      const next = await connection.get(leaseKey);
      expect(next).not.toBeNull();
      expect(next).not.toBe(holder);
      expect(await leads(other)).toBe(true);
    } finally {
      connection.disconnect();
    }
    expect((await chat(urls[1 - leaderIndex] as string)).status).toBe(200);
  });
});

describe('DNS discovery (A records) without Redis', () => {
  it('one backend per address, following the records', async () => {
    const dns = await startLoopbackDns();
    // On every IPv4 loopback address: 127.0.0.1 and 127.0.0.2 are two backends of one engine.
    const sim = await createSimServer(
      SimConfig.parse({ host: '0.0.0.0', port: 0, profile: 'fast', model: MODEL, logLevel: 'silent' }),
    );
    const port = Number(new URL(await sim.listen()).port);
    dns.zone.a.set('vllm-headless.kvroute.test', ['127.0.0.1']);
    const router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        discovery: `dns://vllm-headless.kvroute.test:${port}`,
        discoveryDnsServers: [dns.server],
        discoveryRefreshMs: REFRESH_MS,
        discoveryRemoveAfterMs: 0,
        retryBackoffMs: 1,
      }),
    );
    try {
      const url = await router.listen();
      expect(setIds(router)).toEqual([`vllm-headless@127.0.0.1:${port}`]);
      dns.zone.a.set('vllm-headless.kvroute.test', ['127.0.0.1', '127.0.0.2']);
      await waitFor(() => poolIds(router).length === 2, REFRESH_MS * 10);
      dns.zone.a.set('vllm-headless.kvroute.test', ['127.0.0.2']);
      // discoveryRemoveAfterMs 0: gone from the set at the first answer without it.
      await waitFor(() => setIds(router).join() === `vllm-headless@127.0.0.2:${port}`, REFRESH_MS * 10);
      const answered = await chat(url);
      expect(answered).toEqual({ status: 200, backend: `vllm-headless@127.0.0.2:${port}` });
    } finally {
      await router.close();
      await sim.close();
      await dns.close();
    }
  });

  it('does not take a second time an engine configured under another id', async () => {
    const dns = await startLoopbackDns();
    const sim = await createSimServer(
      SimConfig.parse({ host: '0.0.0.0', port: 0, profile: 'fast', model: MODEL, logLevel: 'silent' }),
    );
    const port = Number(new URL(await sim.listen()).port);
    dns.zone.a.set('vllm-headless.kvroute.test', ['127.0.0.1', '127.0.0.2']);
    const router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: [`http://127.0.0.1:${port}`],
        discovery: `dns://vllm-headless.kvroute.test:${port}`,
        discoveryDnsServers: [dns.server],
        discoveryRefreshMs: REFRESH_MS,
      }),
    );
    try {
      await router.listen();
      // 127.0.0.1 is the configured backend: only 127.0.0.2 is added by discovery.
      expect(setIds(router)).toEqual([`127.0.0.1:${port}`, `vllm-headless@127.0.0.2:${port}`]);
      // The configured one is not discovery's: an empty answer leaves it in the pool.
      dns.zone.a.delete('vllm-headless.kvroute.test');
      await waitFor(() => router.registry.isDrained(`vllm-headless@127.0.0.2:${port}`), REFRESH_MS * 10);
      await waitFor(() => poolIds(router).join() === `127.0.0.1:${port}`, REFRESH_MS * 10);
    } finally {
      await router.close();
      await sim.close();
      await dns.close();
    }
  });
});
