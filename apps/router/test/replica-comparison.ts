import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { findFreePorts, startRedis, type TestRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CHAT_WITH_CONTEXT, hitRate, runConversations, unexplainedMoves, type Turn } from './conversation-workload';
import { ROUTER_PROXY_PROTOCOL_ARGS, startHaproxy, type RunningHaproxy } from './haproxy-kit';
import { waitFor } from './start-test-cluster';

/**
 * The deployment shape, end to end: router processes behind HAProxy in TCP round-robin mode (a new
 * connection per request, so consecutive turns of a conversation reach different replicas), or the
 * same with the client rotating the replicas per request itself, 4 vllm-sim backends, 12 concurrent
 * 6-turn conversations with a shared system prompt. The same workload (same seeds) runs, on sims
 * whose prefix caches are reset before every run, against
 *   (a) one router process,
 *   (b) 3 router processes sharing one Redis,
 *   (c) 3 router processes without Redis, each with its own in-memory state.
 * Shared state must route as one: every turn stays on its conversation's backend unless the router
 * says it spilled, and the hit rate (cached_tokens / prompt_tokens) is within 2 points of (a).
 * Isolated state must be clearly worse, or the comparison proves nothing.
 *
 * The workload (CHAT_WITH_CONTEXT, not the SHORT_CHAT of shared-state.test.ts). Measured here with
 * SHORT_CHAT (6 seeds, twice): single 0.84, shared 0.84, isolated 0.75 — isolated only ~9 points
 * below on average, 2 points in some seeds, while single alone moved 0.80–0.87 between seeds. Why,
 * from the per-turn placements (backend, X-Router-Reason, cached/prompt per turn):
 * - The shared system prompt is most of a SHORT_CHAT prompt (~560 of ~1,300 tokens) and a turn adds
 *   ~28 tokens, so a turn sent to a backend that never saw its conversation still hits ~40 %.
 * - Every conversation starts with the same routing blocks, so every replica, knowing nothing of a
 *   conversation, makes the same choice for it: cold placement hashes the shared head to the same
 *   backend, and ties between backends holding the system prompt are broken by the same head hash.
 *   Isolated replicas therefore put their first conversations on the same backend and guess "that
 *   one" for conversations they never saw, which is right for every conversation living there. The
 *   fewer backends the conversations occupy, the more often the guess is right: with short first
 *   turns (a few ms of simulated prefill at timeScale 50, 15 ms apart) little backlog spreads them,
 *   and with conversations starting 60 ms apart even long contexts end up on one or two backends
 *   (isolated ≈ single).
 * - Turns without a pause collide with later conversations' first-turn prefills, so spills (timing)
 *   moved single and shared by ±3 points per seed, more than the 2 points to be measured.
 * CHAT_WITH_CONTEXT is the realistic case that keeps the shared system prompt but gives each
 * conversation what a real chat has: ~3,000 tokens of its own context (turn 1 ≈ 3,600 tokens),
 * 200-token replies and ~190-token follow-ups (history grows ~400 tokens a turn), and a user pause of
 * 150–300 ms (3–6 s simulated at timeScale 20) before each follow-up. Simulated prefills long enough
 * to overlap spread the 12 conversations over all 4 backends; the pauses keep follow-ups clear of
 * first-turn backlogs, so single and shared land at the same value in nearly every run; a turn routed
 * without knowledge of its conversation loses ~85 % of its prompt, and one routed back to a backend
 * that holds only older turns loses their ~400 tokens each. Measured on a 2-core machine over 16
 * runs of this test (HAProxy and client rotation): single and shared 0.845 in every seed, isolated
 * 0.57–0.73 per seed and 0.64–0.68 as the mean of 3 seeds.
 *
 * Each setup runs every seed once; seeds share no prefix (not even the first routing block: the seed
 * is in the system prompt's first sentence), so the routing state left by one seed (leases are all
 * released) cannot steer the next.
 *
 * Warm-up: before the measured seeds, each setup runs the workload once with WARM_UP_SEED (no prefix in
 * common with them), unmeasured; the sims' caches are reset before every run, so it leaves no cached
 * prefix behind. Without it, setup (a) seed 1 was the first run of the whole test and carried its cold
 * start alone: single seed 1 gave 0.733 in a failing fresh clone and 0.760, 0.813, 0.845 in three runs
 * on a 2-core machine, while seeds 2 and 3 and every shared run gave 0.845, so |shared − single|
 * reached 0.028–0.037 (> 0.02). From the per-turn placements: that run's first turns took 0.8–1.1 s
 * each (0.13–0.17 s in every later run), so the 12 first-turn prefills overlapped and ended in a
 * burst, and follow-ups sent 150–300 ms later found another conversation's ~3,600-token first turn
 * still in flight at their home: 5 `spilled-from-saturated` turns, each to a backend holding only the
 * system prompt (560 of ~4,000 tokens cached). The spills are the cost model pricing the backlog it
 * saw; the cold start made the backlog. Most of the cold start is in this test process (the in-process
 * sims and the client): the same workload sent straight to the sims, no router, had first turns at
 * 0.28–0.56 s on its first run and 0.12–0.16 s on its second, and after that a router that had not
 * served a request yet (cold JIT, first connections, cost-model calibration from its defaults) placed
 * its first seed at 0.845 (twice). Likewise the routers of (b) and (c), cold at their seed 1 but on
 * warm sims, had first turns at 0.15–0.28 s, and (b) gave 0.845 there. The warm-up costs ~7 s (3
 * runs); its hit rates are printed, not asserted.
 *
 * Shared replicas get `--redis-timeout-ms 250`: on a 2-core machine running 7 routers, 4 sims and
 * Redis, a scheduling hiccup can exceed the 50 ms default and switch a replica to local state for
 * ≥ 500 ms, which is the outage path (redis-outage.test.ts), not what this test measures; the table
 * logs the transitions.
 */

const SEEDS = [1, 2, 3] as const;
/** The unmeasured run per setup before SEEDS (see above); any seed not in SEEDS shares no prefix with them. */
const WARM_UP_SEED = 100;
const TIME_SCALE = 20;

interface Setup {
  readonly name: string;
  readonly routerPorts: readonly number[];
  /** Where the client sends requests: the HAProxy frontend, or the replicas themselves (rotated per request). */
  urls: string[];
}

const mean = (values: readonly number[]): number => values.reduce((sum, value) => sum + value, 0) / values.length;

interface ReplicaCounters {
  readonly routed: number;
  readonly degraded: number;
}

/** Sum of the samples of a metric family (counters by label set) in a Prometheus text page. */
function sumMetric(text: string, name: string): number {
  return text
    .split('\n')
    .filter((line) => line.startsWith(`${name}{`) || line.startsWith(`${name} `))
    .reduce((total, line) => total + Number(line.slice(line.lastIndexOf(' ') + 1)), 0);
}

/**
 * How the client reaches a multi-replica setup: one HAProxy frontend per setup (multi-replica-haproxy.system.test.ts,
 * `npm run test:system`), or the replicas themselves, rotated per request (multi-replica.test.ts, `npm test`).
 */
export type ReplicaFront = 'haproxy' | 'client-rotation';

/** The comparison above as one test, with the multi-replica setups reached through `front`. */
export function describeReplicaComparison(front: ReplicaFront): void {
  const viaHaproxy = front === 'haproxy';
  const spread = viaHaproxy ? 'behind HAProxy (TCP round-robin)' : 'rotated per request by the client (no HAProxy)';
  describe(`1 router vs 3 sharing Redis vs 3 isolated, ${spread}`, () => {
    let redis: TestRedis;
    let sims: SimServer[] = [];
    let backendUrls: string[] = [];
    const processes: ChildProcess[] = [];
    let haproxy: RunningHaproxy | undefined;
    let single: Setup;
    let shared: Setup;
    let isolated: Setup;

    /** Each router's ops listener port (its /metrics), by its public port. */
    const opsPorts = new Map<number, number>();

    function spawnRouter(port: number, redisUrl: string | undefined): void {
      const args = [
        '--import',
        'tsx',
        join(import.meta.dirname, '../src/main.ts'),
        '--host',
        '127.0.0.1',
        '--port',
        String(port),
        '--ops-port',
        String(opsPorts.get(port)),
        '--backends',
        backendUrls.join(','),
        '--log-level',
        'warn',
      ];
      if (redisUrl) args.push('--redis-url', redisUrl, '--redis-timeout-ms', '250');
      if (viaHaproxy) args.push(...ROUTER_PROXY_PROTOCOL_ARGS);
      processes.push(spawn(process.execPath, args, { stdio: 'ignore', cwd: join(import.meta.dirname, '../../..') }));
    }

    beforeAll(async () => {
      redis = await startRedis({ fresh: true });
      sims = await Promise.all(
        Array.from({ length: 4 }, () =>
          createSimServer(SimConfig.parse({ port: 0, profile: 'a100-7b', timeScale: TIME_SCALE, model: 'test-model' })),
        ),
      );
      backendUrls = await Promise.all(sims.map((sim) => sim.listen()));
      const ports = await findFreePorts(14);
      for (let index = 0; index < 7; index++) opsPorts.set(ports[index] as number, ports[index + 7] as number);
      const [singlePort, ...replicaPorts] = ports.slice(0, 7);
      single = { name: '(a) 1 router', routerPorts: [singlePort as number], urls: [] };
      shared = { name: '(b) 3 routers, shared Redis', routerPorts: replicaPorts.slice(0, 3), urls: [] };
      isolated = { name: '(c) 3 routers, isolated', routerPorts: replicaPorts.slice(3), urls: [] };
      for (const port of single.routerPorts) spawnRouter(port, undefined);
      for (const port of shared.routerPorts) spawnRouter(port, redis.url);
      for (const port of isolated.routerPorts) spawnRouter(port, undefined);
      const allPorts = [single, shared, isolated].flatMap((setup) => setup.routerPorts);
      await Promise.all(
        allPorts.map((port) =>
          waitFor(
            async () => (await fetch(`http://127.0.0.1:${port}/readyz`).catch(() => null))?.status === 200,
            45_000,
          ),
        ),
      );
      for (const setup of [single, shared, isolated])
        setup.urls = setup.routerPorts.map((port) => `http://127.0.0.1:${port}`);
      if (!viaHaproxy) return;

      // One HAProxy, one TCP round-robin frontend per multi-replica setup.
      const frontPorts = await findFreePorts(2);
      haproxy = startHaproxy({
        retries: 2,
        sections: [shared, isolated].flatMap((setup, index) => [
          `frontend front${index}`,
          `  bind 127.0.0.1:${frontPorts[index]}`,
          `  default_backend replicas${index}`,
          `backend replicas${index}`,
          '  balance roundrobin',
          ...setup.routerPorts.map((port, server) => `  server r${server} 127.0.0.1:${port} check inter 1s`),
        ]),
      });
      shared.urls = [`http://127.0.0.1:${frontPorts[0]}`];
      isolated.urls = [`http://127.0.0.1:${frontPorts[1]}`];
      for (const url of [...shared.urls, ...isolated.urls]) {
        await waitFor(
          async () =>
            (await fetch(`${url}/readyz`, { headers: { connection: 'close' } }).catch(() => null))?.status === 200,
          10_000,
        );
      }
    }, 60_000);

    afterAll(async () => {
      for (const child of processes) child.kill('SIGKILL');
      haproxy?.stop();
      await Promise.all(sims.map((sim) => sim.close()));
      await redis?.stop();
    });

    it('shared state keeps every conversation on its backend and a single router’s hit rate; isolated state falls clearly below', async () => {
      const setups = [single, shared, isolated];
      const counters = async (): Promise<Map<Setup, ReplicaCounters[]>> =>
        new Map(
          await Promise.all(
            setups.map(async (setup) => {
              const perReplica = await Promise.all(
                setup.routerPorts.map(async (port) => {
                  const text = await (await fetch(`http://127.0.0.1:${opsPorts.get(port)}/metrics`)).text();
                  return {
                    routed: sumMetric(text, 'kvroute_router_requests_total'),
                    degraded: sumMetric(text, 'kvroute_router_state_degraded_transitions_total'),
                  };
                }),
              );
              return [setup, perReplica] as const;
            }),
          ),
        );
      const run = async (setup: Setup, seed: number): Promise<Turn[]> => {
        // A cold fleet for every run: no prefix cached on any sim.
        for (const url of backendUrls)
          expect((await fetch(`${url}/sim/reset-cache`, { method: 'POST' })).status).toBe(200);
        return runConversations(setup.urls, { newConnectionPerRequest: true, shape: CHAT_WITH_CONTEXT, seed });
      };
      const warmUpStarted = Date.now();
      const warmUpRates = new Map<Setup, number>();
      for (const setup of setups) warmUpRates.set(setup, hitRate(await run(setup, WARM_UP_SEED)));
      const warmUpSeconds = (Date.now() - warmUpStarted) / 1000;
      const afterWarmUp = await counters();
      const started = Date.now();
      const runs = new Map<Setup, Turn[][]>(setups.map((setup) => [setup, []]));
      for (const seed of SEEDS) {
        for (const setup of setups) runs.get(setup)?.push(await run(setup, seed));
      }
      const rates = new Map(setups.map((setup) => [setup, (runs.get(setup) ?? []).map(hitRate)]));
      const moves = new Map(setups.map((setup) => [setup, (runs.get(setup) ?? []).map(unexplainedMoves)]));
      // The measured runs' share of each replica's counters (the warm-up's taken off).
      const atEnd = await counters();
      const replicaMetrics = new Map(
        setups.map((setup) => [
          setup,
          (atEnd.get(setup) ?? []).map((replica, index) => {
            const before = afterWarmUp.get(setup)?.[index];
            return {
              routed: replica.routed - (before?.routed ?? 0),
              degraded: replica.degraded - (before?.degraded ?? 0),
            };
          }),
        ]),
      );
      const hit = (setup: Setup): number => mean(rates.get(setup) ?? []);
      const table = [
        `KV hit rate (cached_tokens / prompt_tokens), ${viaHaproxy ? 'HAProxy TCP round-robin' : 'client rotates replicas per request (no HAProxy)'}, ` +
          `${SEEDS.length} seeds in ${((Date.now() - started) / 1000).toFixed(1)} s:`,
        `| setup | ${SEEDS.map((seed) => `seed ${seed}`).join(' | ')} | mean | unexplained moves | requests per replica (measured seeds) |`,
        `|---|${SEEDS.map(() => '---:|').join('')}---:|---|---|`,
        ...setups.map(
          (setup) =>
            `| ${setup.name} | ${(rates.get(setup) ?? []).map((rate) => rate.toFixed(3)).join(' | ')} | ` +
            `${hit(setup).toFixed(3)} | ${(moves.get(setup) ?? []).join(' ')} | ` +
            `${(replicaMetrics.get(setup) ?? []).map((replica) => replica.routed).join(', ')} ` +
            `|`,
        ),
        `shared − single ${(hit(shared) - hit(single)).toFixed(3)}, isolated − single ${(hit(isolated) - hit(single)).toFixed(3)}; ` +
          `degraded transitions of the shared replicas: ${(replicaMetrics.get(shared) ?? []).map((replica) => replica.degraded).join(', ')}`,
        `warm-up (seed ${WARM_UP_SEED}, not measured, ${warmUpSeconds.toFixed(1)} s): ` +
          setups.map((setup) => `${setup.name.slice(0, 3)} ${(warmUpRates.get(setup) ?? 0).toFixed(3)}`).join(', '),
      ].join('\n');
      console.info(table);

      for (const turns of [...runs.values()].flat()) expect(turns).toHaveLength(72);
      // Every replica of a multi-replica setup routed its share (HAProxy and the client rotate evenly).
      for (const setup of [shared, isolated])
        expect(
          (replicaMetrics.get(setup) ?? []).every((replica) => replica.routed >= 10 * SEEDS.length),
          table,
        ).toBe(true);
      expect(moves.get(shared), table).toEqual(SEEDS.map(() => 0));
      expect(Math.abs(hit(shared) - hit(single)), table).toBeLessThanOrEqual(0.02);
      expect(hit(isolated), table).toBeLessThanOrEqual(hit(single) - 0.1);
    }, 100_000);
  });
}
