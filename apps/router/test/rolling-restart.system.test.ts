import { spawn, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { createRedis, poolKeys, waitUntilReady } from '@kvroute/redis-store';
import { findFreePorts, startRedis, type TestRedis } from '@kvroute/testing';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROUTER_PROXY_PROTOCOL_ARGS, startHaproxy, type RunningHaproxy } from './haproxy-kit';
import { waitFor } from './start-test-cluster';

/**
 * Acceptance: 3 router processes behind HAProxy (TCP mode, health check `GET /readyz` every 200 ms,
 * `fall 1 rise 2`, `retries 3` + `option redispatch`) under steady streaming and plain (non-streaming)
 * load from the official `openai` client (keep-alive connections, `maxRetries: 0`: a failure is a
 * failure; the plain requests' short answers reuse each connection many times), restarted one by
 * one with SIGTERM (wait for the exit, start a new process on the same port, wait until HAProxy has it
 * up again): zero failed client requests, every stream complete (finish_reason, usage, `[DONE]`), and
 * the pool's in-flight counts in Redis back to 0 at the end.
 *
 * What makes it work (RouterServer.close): on SIGTERM /readyz fails at once, so HAProxy stops sending
 * new connections within a check; for the drain delay (1.5 s here) the router goes on serving, and
 * every response says `Connection: close`, so each keep-alive client connection ends after its
 * current request and the client's next request opens a new connection, which HAProxy sends to
 * another replica. Then the listener closes, the streams under way finish, their leases are released
 * and Redis closes before the process exits.
 *
 * System test (`npm run test:system`): needs HAProxy.
 */
const MODEL = 'test-model';
const ROUTERS = 3;
const CONCURRENT_STREAMS = 6;
const MAX_TOKENS = 24;
/** Plain (non-streaming) requests beside the streams: short answers, so each keep-alive connection carries many. */
const CONCURRENT_PLAIN = 6;
const PLAIN_MAX_TOKENS = 4;
const DRAIN_DELAY_MS = 1_500;
const ROOT = join(import.meta.dirname, '../../..');

interface StreamResult {
  readonly kind: 'stream' | 'plain';
  readonly ok: boolean;
  readonly error?: string;
  readonly finishReason?: string | null;
  readonly completionTokens?: number;
  readonly sawDone?: boolean;
}

describe(`rolling restart of ${ROUTERS} routers behind HAProxy under plain and streaming load`, () => {
  let redis: TestRedis;
  let sims: SimServer[] = [];
  let backendUrls: string[] = [];
  let routerPorts: number[] = [];
  /** Each slot's ops listener port (a restarted router takes its slot's again). */
  let opsPorts: number[] = [];
  const routers: (ChildProcess | null)[] = [];
  const stderrOf = new Map<number, string>();
  let haproxy: RunningHaproxy | undefined;
  let frontUrl = '';
  let statsUrl = '';

  function startRouter(slot: number): ChildProcess {
    const port = routerPorts[slot] as number;
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        join(ROOT, 'apps/router/src/main.ts'),
        '--host',
        '127.0.0.1',
        '--port',
        String(port),
        '--ops-port',
        String(opsPorts[slot]),
        '--backends',
        backendUrls.join(','),
        '--redis-url',
        redis.url,
        // A 2-core machine running 3 routers, 3 sims, Redis and HAProxy: a hiccup past the 50 ms default
        // would switch a replica to local state (the outage path, tested elsewhere).
        '--redis-timeout-ms',
        '500',
        '--shutdown-drain-delay-ms',
        String(DRAIN_DELAY_MS),
        '--shutdown-grace-ms',
        '15000',
        '--log-level',
        'warn',
        ...ROUTER_PROXY_PROTOCOL_ARGS,
      ],
      { stdio: ['ignore', 'ignore', 'pipe'], cwd: ROOT },
    );
    child.stderr?.on('data', (chunk: Buffer) => stderrOf.set(port, (stderrOf.get(port) ?? '') + chunk.toString()));
    routers[slot] = child;
    return child;
  }

  /** Each router server's HAProxy status (`UP`, `DOWN`, `UP 1/2`, …), from the stats page's CSV. */
  async function serverStates(): Promise<Map<string, string>> {
    const csv = await (await fetch(`${statsUrl};csv`)).text();
    const [header, ...rows] = csv.trim().split('\n');
    const columns = (header ?? '').replace(/^# /, '').split(',');
    const [proxy, server, status] = ['pxname', 'svname', 'status'].map((name) => columns.indexOf(name)) as [
      number,
      number,
      number,
    ];
    const states = new Map<string, string>();
    for (const row of rows) {
      const cells = row.split(',');
      if (cells[proxy] === 'routers' && cells[server]?.startsWith('r'))
        states.set(cells[server] as string, cells[status] as string);
    }
    return states;
  }

  beforeAll(async () => {
    redis = await startRedis({ fresh: true, logger: () => undefined });
    sims = await Promise.all(
      Array.from({ length: 3 }, (_, index) =>
        createSimServer(
          SimConfig.parse({ port: 0, profile: 'a100-7b', model: MODEL, seed: index, logLevel: 'silent' }),
        ),
      ),
    );
    backendUrls = await Promise.all(sims.map((sim) => sim.listen()));
    const ports = await findFreePorts(2 * ROUTERS + 2);
    routerPorts = ports.slice(0, ROUTERS);
    opsPorts = ports.slice(ROUTERS + 2);
    const [frontPort, statsPort] = ports.slice(ROUTERS, ROUTERS + 2) as [number, number];
    for (let slot = 0; slot < ROUTERS; slot++) startRouter(slot);

    haproxy = startHaproxy({
      retries: 3,
      defaults: ['  timeout check 2s'],
      sections: [
        'frontend openai',
        `  bind 127.0.0.1:${frontPort}`,
        '  default_backend routers',
        'backend routers',
        '  balance roundrobin',
        '  option httpchk GET /readyz',
        '  default-server check inter 200ms fall 1 rise 2',
        ...routerPorts.map((port, slot) => `  server r${slot} 127.0.0.1:${port}`),
        'listen stats',
        '  mode http',
        `  bind 127.0.0.1:${statsPort}`,
        '  timeout client 10s',
        '  stats enable',
        '  stats uri /stats',
      ],
    });
    frontUrl = `http://127.0.0.1:${frontPort}`;
    statsUrl = `http://127.0.0.1:${statsPort}/stats`;
    await waitFor(async () => {
      const states = await serverStates().catch(() => new Map<string, string>());
      return states.size === ROUTERS && [...states.values()].every((state) => state === 'UP');
    }, 45_000);
  }, 60_000);

  afterAll(async () => {
    for (const child of routers) child?.kill('SIGKILL');
    haproxy?.stop();
    await Promise.all(sims.map((sim) => sim.close()));
    await redis?.stop();
  });

  it('restarts every router with SIGTERM under steady plain and streaming load: zero failed requests, every stream complete, in-flight back to 0', {
    timeout: 75_000,
  }, async () => {
    const startedAt = performance.now();
    // The official client, keep-alive, no retries; its fetch notes which responses carried `data: [DONE]`.
    const sawDone = new WeakMap<Response, boolean>();
    const client = new OpenAI({
      baseURL: `${frontUrl}/v1`,
      apiKey: 'unused',
      maxRetries: 0,
      timeout: 30_000,
      fetch: async (url, init) => watchForDone(await fetch(url, init), sawDone),
    });
    const results: StreamResult[] = [];
    let stopping = false;
    const loop = async (worker: number): Promise<void> => {
      for (let turn = 0; !stopping; turn++) {
        try {
          const { data: stream, response } = await client.chat.completions
            .create({
              model: MODEL,
              messages: [{ role: 'user', content: `stream ${worker}-${turn}: tell me something` }],
              max_tokens: MAX_TOKENS,
              stream: true,
              stream_options: { include_usage: true },
            })
            .withResponse();
          let finishReason: string | null = null;
          let completionTokens = 0;
          for await (const chunk of stream) {
            finishReason = chunk.choices[0]?.finish_reason ?? finishReason;
            if (chunk.usage) completionTokens = chunk.usage.completion_tokens;
          }
          const done = sawDone.get(response) === true;
          const ok = finishReason !== null && completionTokens === MAX_TOKENS && done;
          results.push({
            kind: 'stream',
            ok,
            finishReason,
            completionTokens,
            sawDone: done,
            ...(ok ? {} : { error: 'incomplete stream' }),
          });
        } catch (error) {
          results.push({ kind: 'stream', ok: false, error: describeError(error) });
        }
      }
    };
    const plainLoop = async (worker: number): Promise<void> => {
      for (let turn = 0; !stopping; turn++) {
        try {
          const completion = await client.chat.completions.create({
            model: MODEL,
            messages: [{ role: 'user', content: `plain ${worker}-${turn}: say something short` }],
            max_tokens: PLAIN_MAX_TOKENS,
          });
          const finishReason = completion.choices[0]?.finish_reason ?? null;
          const completionTokens = completion.usage?.completion_tokens ?? 0;
          const ok = finishReason !== null && completionTokens === PLAIN_MAX_TOKENS;
          results.push({ kind: 'plain', ok, finishReason, completionTokens, ...(ok ? {} : { error: 'incomplete' }) });
        } catch (error) {
          results.push({ kind: 'plain', ok: false, error: describeError(error) });
        }
      }
    };
    const load = Promise.all([
      ...Array.from({ length: CONCURRENT_STREAMS }, (_, worker) => loop(worker)),
      ...Array.from({ length: CONCURRENT_PLAIN }, (_, worker) => plainLoop(worker)),
    ]);

    const restarts: {
      slot: number;
      exitCode: number | null;
      stopMs: number;
      backUpMs: number;
      completedDuring: number;
    }[] = [];
    try {
      await sleep(2_000);
      for (let slot = 0; slot < ROUTERS; slot++) {
        const before = results.length;
        const old = routers[slot] as ChildProcess;
        const exited = new Promise<number | null>((resolve) => old.once('exit', (code) => resolve(code)));
        const signalledAt = performance.now();
        old.kill('SIGTERM');
        const exitCode = await exited;
        const stopMs = performance.now() - signalledAt;
        routers[slot] = null;
        startRouter(slot);
        await waitFor(
          async () => (await serverStates().catch(() => new Map<string, string>())).get(`r${slot}`) === 'UP',
          40_000,
        );
        restarts.push({
          slot,
          exitCode,
          stopMs: Math.round(stopMs),
          backUpMs: Math.round(performance.now() - signalledAt),
          completedDuring: results.length - before,
        });
        await sleep(1_000);
      }
    } finally {
      stopping = true;
      await load;
    }

    // Every lease released: the pool's in-flight counts and lease index in Redis are empty (released by
    // the routers, not expired: nothing purges once the load has stopped, and the TTL is 15 s).
    const redisClient = createRedis(redis.url, 'request-path', { commandTimeoutMs: 5_000 });
    const keys = poolKeys(MODEL);
    let inflight: Record<string, string> = {};
    let leases = -1;
    try {
      await waitUntilReady(redisClient);
      await waitFor(async () => {
        inflight = await redisClient.hgetall(keys.inflight);
        leases = await redisClient.zcard(keys.leaseDeadlines);
        return Object.keys(inflight).length === 0 && leases === 0;
      }, 3_000).catch(() => undefined);
    } finally {
      redisClient.disconnect();
    }

    const failures = results.filter((result) => !result.ok);
    const count = (kind: StreamResult['kind'], ok?: boolean) =>
      results.filter((result) => result.kind === kind && (ok === undefined || result.ok === ok)).length;
    const summary = [
      `rolling restart: ${results.length} requests through HAProxy in ${((performance.now() - startedAt) / 1000).toFixed(1)} s: ` +
        `${count('stream')} streams (${CONCURRENT_STREAMS} concurrent, ${MAX_TOKENS} tokens each, ${count('stream', false)} failed), ` +
        `${count('plain')} plain (${CONCURRENT_PLAIN} concurrent, ${PLAIN_MAX_TOKENS} tokens each, ${count('plain', false)} failed)`,
      ...restarts.map(
        (restart) =>
          `  r${restart.slot}: SIGTERM → exit ${restart.exitCode} in ${restart.stopMs} ms, back UP in ` +
          `HAProxy after ${restart.backUpMs} ms; ${restart.completedDuring} requests completed meanwhile`,
      ),
      `  Redis in-flight at the end: ${JSON.stringify(inflight)}, lease index ${leases}`,
      ...failures.slice(0, 5).map((failure) => `  failure: ${JSON.stringify(failure)}`),
    ].join('\n');
    console.info(summary);
    if (failures.length > 0)
      for (const [port, text] of stderrOf)
        if (text.trim()) console.warn(`router :${port} stderr:\n${text.slice(-4_000)}`);

    expect(
      restarts.map((restart) => restart.exitCode),
      summary,
    ).toEqual([0, 0, 0]);
    expect(failures, summary).toEqual([]);
    expect(count('stream'), summary).toBeGreaterThanOrEqual(3 * CONCURRENT_STREAMS);
    expect(count('plain'), summary).toBeGreaterThanOrEqual(3 * CONCURRENT_PLAIN);
    // The load ran through every restart, not around it.
    for (const restart of restarts) expect(restart.completedDuring, summary).toBeGreaterThan(0);
    expect(inflight, summary).toEqual({});
    expect(leases, summary).toBe(0);
  });
});

function describeError(error: unknown): string {
  return `${(error as Error).name}: ${(error as Error).message} ${String((error as { cause?: unknown }).cause ?? '')}`;
}

/** Passes the response through, noting in `sawDone` whether its body carried `data: [DONE]`. */
function watchForDone(response: Response, sawDone: WeakMap<Response, boolean>): Response {
  if (!response.body) return response;
  const decoder = new TextDecoder();
  let tail = '';
  let watched: Response | null = null;
  const body = response.body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        tail = (tail + decoder.decode(chunk, { stream: true })).slice(-64);
        if (tail.includes('data: [DONE]') && watched) sawDone.set(watched, true);
        controller.enqueue(chunk);
      },
    }),
  );
  watched = new Response(body, { status: response.status, statusText: response.statusText, headers: response.headers });
  sawDone.set(watched, false);
  return watched;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
