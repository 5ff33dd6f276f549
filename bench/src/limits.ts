/**
 * Benchmark: tenant limits across router replicas (issue 14, acceptance 2).
 *
 *   clients ──► HAProxy (TCP, round-robin) ──► 3 kvroute replicas ──► 2 vllm-sim
 *                                                   │
 *                                             private redis-server (stopped mid-run, then restarted)
 *
 * Two API keys in a key file (so keys need no Redis): one limited to `--requests-per-minute` (600), driven
 * by `--clients` (50) closed-loop clients; one limited to `--tokens-per-minute` (30,000), driven by
 * `--token-clients` (20), measured from each response's usage. Clients honour `retry-after-ms` (as the
 * openai client does), so the refused load is what real clients send. Every response is recorded:
 * status, whether a 429 carried Retry-After, usage tokens.
 *
 * Timeline (defaults): settle 10 s (the buckets' burst is spent) → shared window 60 s (limits exact in
 * Redis) → Redis stopped → settle 10 s (each replica's share starts with its own burst) → outage window
 * 40 s (limits ÷ 3 replicas, in memory) → Redis restarted (empty: a fresh shared burst) → settle 10 s → recovered window 20 s.
 * (`--settle-seconds` is the first settle only; the two after a change of mode are fixed, SWITCH_SETTLE_SECONDS.)
 * Pass: in every window the served rate is within ±5 % of the limit, every 429 carries Retry-After, no
 * request fails for any other reason, and every replica logged its switch to local shares.
 *
 * Usage: npm run bench:limits -- [--seconds 60] [--settle-seconds 10] [--outage-seconds 40] [--recovered-seconds 20]
 *        [--requests-per-minute 600] [--tokens-per-minute 30000] [--clients 50] [--token-clients 20]
 * Needs HAProxy (/usr/sbin/haproxy) and redis-server. Writes bench/results/limits-<time>.{json,md,svg}.
 */
import { parseCommandLine } from '@kvroute/platform/command-line';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { LocalRedisServer } from '@kvroute/testing';
import type { LimitSample, LimitWindow, LoadId } from './limits-report';
import type { LocalSim } from './local-sims';
import type { ProxyProcess } from './proxy-processes';

const args = parseCommandLine({
  usage: 'npm run bench:limits -- [options]',
  summary:
    'Per-key and per-tenant limits measured across 3 router replicas behind HAProxy, through a ' +
    'Redis\noutage. Needs HAProxy and redis-server. Writes bench/results/limits-<time>.{json,md,svg}.',
  options: {
    seconds: { type: 'string', default: '60', value: 'number', description: 'shared window (limits exact in Redis)' },
    'settle-seconds': {
      type: 'string',
      default: '10',
      value: 'number',
      description: 'first settle, before the shared window',
    },
    'outage-seconds': { type: 'string', default: '40', value: 'number', description: 'window with Redis stopped' },
    'recovered-seconds': { type: 'string', default: '20', value: 'number', description: 'window after Redis is back' },
    'requests-per-minute': {
      type: 'string',
      default: '600',
      value: 'number',
      description: "the request-limited key's limit",
    },
    'tokens-per-minute': {
      type: 'string',
      default: '30000',
      value: 'number',
      description: "the token-limited key's limit",
    },
    clients: {
      type: 'string',
      default: '50',
      value: 'number',
      description: 'closed-loop clients of the request-limited key',
    },
    'token-clients': {
      type: 'string',
      default: '20',
      value: 'number',
      description: 'closed-loop clients of the token-limited key',
    },
    replicas: { type: 'string', default: '3', value: 'number', description: 'router replicas behind HAProxy' },
  },
});

// Loaded once the command line is accepted: --help, --version and a mistyped flag answer without them.
const { Agent, request } = await import('undici');
const { startLocalRedisServer } = await import('@kvroute/testing');
const { LOAD_IDS, perSecond, renderLimitsMarkdown, summarizeLimits } = await import('./limits-report');
const { newBenchKey, writeBenchKeyFile } = await import('./bench-api-keys');
const { startLocalSims, stopLocalSims } = await import('./local-sims');
const { haproxyVersion, startHaproxyProcess, startRouterProcess } = await import('./proxy-processes');
const { lineChart, PALETTE } = await import('./report/html');
// Classes also named as types: a type-only import of the name would clash with the const above.
type Agent = InstanceType<typeof Agent>;

const positive = (name: string, text: string | undefined): number => {
  const value = Number(text);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`--${name} must be a positive number, got ${text}`);
  return value;
};
const sharedSeconds = positive('seconds', args.seconds);
const settleSeconds = positive('settle-seconds', args['settle-seconds']);
const outageSeconds = positive('outage-seconds', args['outage-seconds']);
const recoveredSeconds = positive('recovered-seconds', args['recovered-seconds']);
const limits = {
  requestsPerMinute: positive('requests-per-minute', args['requests-per-minute']),
  tokensPerMinute: positive('tokens-per-minute', args['tokens-per-minute']),
};
const clientCounts: Record<LoadId, number> = {
  requests: positive('clients', args.clients),
  tokens: positive('token-clients', args['token-clients']),
};
const replicaCount = positive('replicas', args.replicas);
/**
 * After a change of mode (Redis stopped or back), how long before the next window opens, s: each
 * replica's local share starts with its own burst (the shares' bursts add up to one limit's burst), and
 * a replica with few clients takes seconds to spend it (measured: 6 s for the tokens key's 20 clients).
 */
const SWITCH_SETTLE_SECONDS = 10;
const MODEL = 'limits-model';
/** Each request's output cap; the prompt is ~200 tokens, so a tokens-key request uses ~216. */
const MAX_TOKENS = 16;
/** A client's pause on a 429 without retry-after-ms, and the bounds of what it honours, ms. */
const RETRY_FLOOR_MS = 5;
const RETRY_CEILING_MS = 2_000;

/** The windows of the run, ms since the load started; also when Redis stops and comes back. */
function timeline(): { windows: LimitWindow[]; stopRedisAtMs: number; restartRedisAtMs: number; endMs: number } {
  const sharedFrom = settleSeconds * 1_000;
  const stopRedisAtMs = sharedFrom + sharedSeconds * 1_000;
  const outageFrom = stopRedisAtMs + SWITCH_SETTLE_SECONDS * 1_000;
  const restartRedisAtMs = outageFrom + outageSeconds * 1_000;
  const recoveredFrom = restartRedisAtMs + SWITCH_SETTLE_SECONDS * 1_000;
  const endMs = recoveredFrom + recoveredSeconds * 1_000;
  return {
    windows: [
      {
        name: 'burst',
        description: 'the first second: the bucket’s burst (one period’s worth), not a rate',
        fromMs: 0,
        toMs: 1_000,
        checked: false,
      },
      {
        name: 'shared',
        description: 'Redis up: one bucket in Redis for all replicas',
        fromMs: sharedFrom,
        toMs: stopRedisAtMs,
      },
      {
        name: 'outage',
        description: `Redis stopped: each replica enforces limit ÷ ${replicaCount} in memory`,
        fromMs: outageFrom,
        toMs: restartRedisAtMs,
      },
      { name: 'recovered', description: 'Redis back: shared again', fromMs: recoveredFrom, toMs: endMs },
    ],
    stopRedisAtMs,
    restartRedisAtMs,
    endMs,
  };
}

/** ~200 words of filler, distinct per request, so prompts differ (nothing is special about them here). */
function prompt(client: number, sequence: number): string {
  return `client ${client} request ${sequence}: ${'the quick brown fox jumps over the lazy dog '.repeat(22)}`;
}

interface ClientLoop {
  readonly load: LoadId;
  readonly key: string;
  readonly client: number;
}

async function runClient(
  loop: ClientLoop,
  url: string,
  agent: Agent,
  startedAt: number,
  endMs: number,
  samples: LimitSample[],
): Promise<void> {
  for (let sequence = 0; performance.now() - startedAt < endMs; sequence++) {
    let status = 0;
    let retryAfter = false;
    let usageTokens = 0;
    let pauseMs = 0;
    try {
      const response = await request(`${url}/v1/chat/completions`, {
        method: 'POST',
        dispatcher: agent,
        headers: { 'content-type': 'application/json', authorization: `Bearer ${loop.key}` },
        body: JSON.stringify({
          model: MODEL,
          messages: [{ role: 'user', content: prompt(loop.client, sequence) }],
          max_tokens: MAX_TOKENS,
        }),
        headersTimeout: 30_000,
        bodyTimeout: 30_000,
      });
      status = response.statusCode;
      const text = await response.body.text();
      if (status === 200) {
        const usage = (JSON.parse(text) as { usage?: { prompt_tokens?: number; completion_tokens?: number } }).usage;
        usageTokens = (usage?.prompt_tokens ?? 0) + (usage?.completion_tokens ?? 0);
      } else if (status === 429) {
        retryAfter = response.headers['retry-after'] !== undefined;
        const retryMs = Number(response.headers['retry-after-ms']);
        pauseMs = Math.min(RETRY_CEILING_MS, Math.max(RETRY_FLOOR_MS, Number.isFinite(retryMs) ? retryMs : 1_000));
      } else {
        pauseMs = 100;
      }
    } catch {
      pauseMs = 100;
    }
    samples.push({ load: loop.load, atMs: performance.now() - startedAt, status, retryAfter, usageTokens });
    // A little jitter so the refused clients do not all come back in the same millisecond.
    if (pauseMs > 0) await new Promise((resolve) => setTimeout(resolve, pauseMs + Math.random() * 5));
  }
}

/** Whether `text` has appeared in the process's output since now (across chunk boundaries). */
function watchOutput(proxy: ProxyProcess, text: string): () => boolean {
  let seen = false;
  let carry = '';
  const look = (chunk: Buffer): void => {
    if (seen) return;
    const window = carry + chunk.toString('utf8');
    seen = window.includes(text);
    carry = window.slice(-text.length);
  };
  proxy.process.stdout?.on('data', look);
  proxy.process.stderr?.on('data', look);
  return () => seen;
}

async function main(): Promise<void> {
  const haproxy = haproxyVersion();
  if (!haproxy) throw new Error('bench:limits needs HAProxy (/usr/sbin/haproxy): apt-get install -y haproxy');
  const plan = timeline();
  const requestsKey = newBenchKey('rpm-tenant', { requestsPerMinute: limits.requestsPerMinute });
  const tokensKey = newBenchKey('tpm-tenant', { tokensPerMinute: limits.tokensPerMinute });
  const keyFile = writeBenchKeyFile([requestsKey, tokensKey]);

  const opened: (() => Promise<void>)[] = [];
  let redis: LocalRedisServer | undefined;
  let sims: LocalSim[] = [];
  const routers: ProxyProcess[] = [];
  const agent = new Agent({ connections: clientCounts.requests + clientCounts.tokens, keepAliveTimeout: 60_000 });
  try {
    console.log(
      `bench:limits — ${replicaCount} router replicas behind ${haproxy}, limits ${limits.requestsPerMinute} ` +
        `requests/min and ${limits.tokensPerMinute} tokens/min`,
    );
    redis = await startLocalRedisServer();
    const redisServer = redis;
    opened.push(() => redisServer.stop());
    console.log(`  redis-server on ${redis.url}`);
    sims = await startLocalSims(2, ['--profile', 'fast', '--model', MODEL]);
    const simsToStop = sims;
    opened.push(() => stopLocalSims(simsToStop));
    // The replicas agree on the cache-salt secret through Redis (SET NX), as a fleet without a configured one does.
    const routerArgs = ['--auth', 'api-keys', '--api-keys-file', keyFile, '--log-level', 'warn'];
    for (let index = 0; index < replicaCount; index++) {
      const router = await startRouterProcess(sims.map((sim) => sim.url).join(','), {
        redisUrl: redis.url,
        extraArgs: routerArgs,
      });
      routers.push(router);
      opened.push(() => router.stop());
    }
    // The switch to local shares is logged once per replica; watched on the live output (a replica's
    // kept tail is too short: its Redis reconnect warnings follow).
    const switchLogged = routers.map((router) => watchOutput(router, 'this replica enforces its share'));
    const balancer = await startHaproxyProcess(routers.map((router) => router.url));
    opened.push(() => balancer.stop());
    console.log(
      `  ${routers.length} routers (${routers.map((router) => router.url).join(', ')}), HAProxy on ${balancer.url}`,
    );
    // One heartbeat round (2 s) so that every replica counts all the others before Redis goes away.
    await new Promise((resolve) => setTimeout(resolve, 2_500));

    const samples: LimitSample[] = [];
    const startedAt = performance.now();
    const loops: ClientLoop[] = LOAD_IDS.flatMap((load) =>
      Array.from({ length: clientCounts[load] }, (_, client) => ({
        load,
        key: load === 'requests' ? requestsKey.secret : tokensKey.secret,
        client,
      })),
    );
    const running = Promise.all(
      loops.map((loop) => runClient(loop, balancer.url, agent, startedAt, plan.endMs, samples)),
    );
    console.log(
      `  ${loops.length} clients for ${(plan.endMs / 1_000).toFixed(0)} s: Redis stops at ${plan.stopRedisAtMs / 1_000} ` +
        `s and returns at ${plan.restartRedisAtMs / 1_000} s`,
    );

    let redisStopped = false;
    let redisRestarted = false;
    let reported = 0;
    while (performance.now() - startedAt < plan.endMs) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      const elapsed = performance.now() - startedAt;
      if (!redisStopped && elapsed >= plan.stopRedisAtMs) {
        redisStopped = true;
        console.log(`  ${(elapsed / 1_000).toFixed(1)} s: stopping Redis`);
        await redisServer.stop();
      }
      if (!redisRestarted && elapsed >= plan.restartRedisAtMs) {
        redisRestarted = true;
        console.log(`  ${(elapsed / 1_000).toFixed(1)} s: restarting Redis`);
        await redisServer.restart();
      }
      if (elapsed - reported >= 10_000) {
        reported = elapsed;
        const recent = samples.filter((sample) => sample.atMs >= elapsed - 10_000);
        const line = LOAD_IDS.map((load) => {
          const mine = recent.filter((sample) => sample.load === load);
          const served = mine.filter((sample) => sample.status === 200);
          const amount =
            load === 'requests' ? served.length : served.reduce((sum, sample) => sum + sample.usageTokens, 0);
          return `${load} key ${Math.round(amount * 6)}/min (${mine.filter((sample) => sample.status === 429).length} × 429)`;
        });
        console.log(`  ${(elapsed / 1_000).toFixed(0)} s: last 10 s: ${line.join(', ')}`);
      }
    }
    await running;

    const summary = summarizeLimits(samples, plan.windows, limits);
    const logged = switchLogged.map((seen) => seen());
    const checks = [
      ...summary.checks,
      {
        name: 'every replica logged its switch to local shares',
        passed: logged.every(Boolean),
        detail: logged.map((seen, index) => `replica ${index + 1}: ${seen ? 'logged' : 'no log line'}`).join(', '),
      },
    ];
    const header = [
      `# Tenant limits across replicas (${new Date().toISOString()})`,
      '',
      `${replicaCount} kvroute replicas behind HAProxy (TCP, round-robin), one private redis-server, 2 vllm-sim (fast profile).`,
      `Requests key: ${limits.requestsPerMinute}/min, ${clientCounts.requests} clients. Tokens key: ` +
        `${limits.tokensPerMinute} tokens/min (usage tokens), ${clientCounts.tokens} clients.`,
      'Clients honour retry-after-ms. Windows open after the burst is spent: GCRA admits one period’s worth at once, then the rate.',
    ];
    const markdown = renderLimitsMarkdown({ ...summary, checks }, plan.windows, limits, header);
    console.log(`\n${markdown}`);
    const chart = lineChart({
      title: 'Served per second (tokens key: usage tokens ÷ 50)',
      xLabel: 'seconds since start (Redis stopped and restarted at the window edges)',
      yLabel: 'per second',
      series: [
        {
          label: `requests key (limit ${(limits.requestsPerMinute / 60).toFixed(1)}/s)`,
          color: PALETTE[0] as string,
          points: perSecond(samples, 'requests', plan.endMs),
        },
        {
          label: `tokens key ÷ 50 (limit ${(limits.tokensPerMinute / 60 / 50).toFixed(1)}/s)`,
          color: PALETTE[1] as string,
          points: perSecond(samples, 'tokens', plan.endMs).map(([x, y]) => [x, y / 50] as [number, number]),
        },
      ],
    });
    const stamp = new Date().toISOString().replace(/[:.]/g, '-');
    const resultsDir = join(import.meta.dirname, '..', 'results');
    mkdirSync(resultsDir, { recursive: true });
    writeFileSync(join(resultsDir, `limits-${stamp}.md`), markdown);
    writeFileSync(join(resultsDir, `limits-${stamp}.svg`), chart);
    writeFileSync(
      join(resultsDir, `limits-${stamp}.json`),
      JSON.stringify(
        {
          limits,
          clients: clientCounts,
          replicas: replicaCount,
          windows: plan.windows,
          summary: { ...summary, checks },
          samples,
        },
        null,
        1,
      ),
    );
    console.log(`results written to bench/results/limits-${stamp}.{md,svg,json}`);
    if (!checks.every((check) => check.passed)) process.exitCode = 1;
  } finally {
    await agent.close();
    for (const close of opened.reverse())
      await close().catch((error: unknown) => console.error(`close failed: ${String(error)}`));
    rmSync(dirname(keyFile), { recursive: true, force: true });
  }
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});
