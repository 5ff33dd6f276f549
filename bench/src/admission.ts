/**
 * Benchmark: admission under a noisy neighbour and under overload (issue 30, acceptances 1 and 2).
 *
 *   clients ──► HAProxy (TCP, PROXY v2) ──► 3 kvroute replicas, flow control on  ──┐
 *          └──► HAProxy (TCP, PROXY v2) ──► 3 kvroute replicas, flow control off ──┴──► 4 vllm-sim
 *                       every replica shares one private redis-server (stopped for a while mid-run)
 *
 * Both router sets run at once over the same engines, so "today" (flow control off) and "after" are
 * measured in one sitting. Each tenant is an API key of weight 1 in a key file; load is open-loop
 * (Poisson arrivals), so a refused request is not retried and does not slow its sender. The steady
 * tenant streams (its TTFT is what it feels); the noisy one does not (only its share of tokens counts).
 * The engines are made scarce (`--num-gpu-blocks`, a slow profile) so 4 of them saturate at a load this
 * 2-core machine can offer; `--flow-max-inflight-per-backend` is the pool's capacity the routers use.
 *
 * Windows (each `--window-seconds`, requests tagged by the window they were sent in):
 *   calibrate      steady tenant at a trickle: the engines' service time → the pool's throughput X
 *   alone          steady tenant at `--steady-share` × X, flow control on
 *   contended-off  + noisy tenant at 10 × its share (5 X), flow control off (today's behaviour)
 *   contended      the same, flow control on
 *   redis-down     the same, Redis stopped for `--outage-seconds` (each replica queues on its own)
 *   recovered      the same, Redis back
 *   unloaded       one tenant at 0.3 X (overload's reference)
 *   overload-off   one tenant at 2 X, flow control off
 *   overload       one tenant at 2 X, flow control on
 * The first `SETTLE_MS` of each window are not counted. Requests still running `GRACE_MS` after their window are aborted (counted as failed): without flow
 * control the engines' queues grow without bound, and the run must end.
 *
 * Usage: npm run bench:admission -- [--window-seconds 30] [--outage-seconds 20] [--steady-share 0.4]
 *        [--queue-wait-ms 100] [--scenario all|noisy-neighbour|overload] [--router-args="FLAGS"]
 * Needs HAProxy (/usr/sbin/haproxy) and redis-server. Writes bench/results/admission-<time>.{md,json}.
 */
import { parseCommandLine } from '@kvroute/platform/command-line';
import { setMaxListeners } from 'node:events';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { resultsDir } from './app-process';
import type { LocalRedisServer } from '@kvroute/testing';
import type { BenchKey } from './bench-api-keys';
import type { ProxyProcess } from './proxy-processes';
// Imports nothing: loaded with the command line, as overhead.ts's report.
import {
  type AdmissionLoad,
  type AdmissionSample,
  demandShare,
  fairShare,
  figuresByWindow,
  figuresOf,
  noisyNeighbourChecks,
  overloadChecks,
  renderChecks,
  renderWindowTable,
} from './admission-report';

const args = parseCommandLine({
  usage: 'npm run bench:admission -- [options]',
  summary:
    'Flow control and admission under a noisy neighbour and overload, 3 replicas behind HAProxy.\nNeeds ' +
    'HAProxy and redis-server. Writes bench/results/admission-<time>.{md,json}.',
  options: {
    'window-seconds': { type: 'string', default: '30', value: 'number', description: 'length of each window' },
    'outage-seconds': {
      type: 'string',
      default: '20',
      value: 'number',
      description: 'Redis stopped this long in the redis-down window',
    },
    'steady-share': {
      type: 'string',
      default: '0.4',
      value: 'number',
      description: "the steady tenant's load, as a share of the pool's throughput",
    },
    'queue-wait-ms': {
      type: 'string',
      default: '100',
      value: 'number',
      description: "the routers' flowMaxQueueWaitMs",
    },
    scenario: { type: 'string', default: 'all', description: 'all, noisy-neighbour or overload' },
    'router-args': {
      type: 'string',
      default: '',
      description: 'more router flags, space-separated, for both sets (e.g. "--non-streaming-prefill-done-factor=0")',
    },
  },
});

// Loaded once the command line is accepted: --help, --version and a mistyped flag answer without them.
const { eventCarriesOutput, SSE_DONE, SseParser } = await import('@kvroute/protocols');
const { startLocalRedisServer } = await import('@kvroute/testing');
const { Agent, request } = await import('undici');
const { queueWaitsPast, scrapeFlowGauges, shedByReason } = await import('./admission-metrics');
const { newBenchKey, writeBenchKeyFile } = await import('./bench-api-keys');
const { startLocalSims, stopLocalSims } = await import('./local-sims');
const { buildBundles, haproxyVersion, ROUTER_PROXY_PROTOCOL_FLAGS, startHaproxyProcess, startRouterProcess } =
  await import('./proxy-processes');
// Classes also named as types: a type-only import of the name would clash with the const above.
type Agent = InstanceType<typeof Agent>;

const positive = (name: string): number => {
  const value = Number(args[name as keyof typeof args]);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`--${name} must be a positive number`);
  return value;
};
const windowMs = positive('window-seconds') * 1_000;
const outageMs = positive('outage-seconds') * 1_000;
const steadyShare = positive('steady-share');
const queueWaitMs = positive('queue-wait-ms');
const scenario = args.scenario as string;
const extraRouterArgs = (args['router-args'] as string).split(' ').filter((flag) => flag !== '');
if (!['all', 'noisy-neighbour', 'overload'].includes(scenario)) throw new Error(`unknown --scenario ${scenario}`);

const MODEL = 'admission-model';
const SIMS = 4;
const REPLICAS = 3;
/** Requests a backend runs at once before its pool is saturated (the routers' --flow-max-inflight-per-backend). */
const SLOTS_PER_BACKEND = 4;
/** Per replica (the routers' --flow-max-queued-requests). */
const QUEUE_BOUND = 200;
const MAX_TOKENS = 64;
/**
 * Requests sent in a window's first this many ms are not counted (tagged `<window>-settling`): a window
 * opens on a drained pool, and its first service time is a transient (a flood fills every slot at once).
 */
const SETTLE_MS = 5_000;
/** How long a request may run past its window's end before it is aborted, ms. */
const GRACE_MS = 15_000;
/** Requests one load may have outstanding: an open loop against a stalled pool must not grow without bound. */
const MAX_OUTSTANDING = 3_000;
/**
 * 260 blocks of 16 tokens hold ~6 of these requests (~660 tokens each at the end): past that vLLM queues
 * (and preempts). The routers' capacity (SLOTS_PER_BACKEND, 4) plus its express slots (a quarter more)
 * fit; twice the capacity does not, so without flow control the engines' own queues grow.
 */
const SIM_ARGS = ['--profile', 'a100-70b-tp4', '--model', MODEL, '--num-gpu-blocks', '260', '--max-model-len', '2048'];

/** ~600 tokens, distinct from the first word so no two requests share a cached prefix. */
/** A router process's /metrics base: its ops listener (proxy-processes.ts), not the URL requests go to. */
const metricsUrlOf = (router: ProxyProcess): string => router.metricsUrl ?? router.url;

function promptOf(load: AdmissionLoad, sequence: number): string {
  return `${load} ${sequence} ${Math.random()}: ${'the quick brown fox jumps over the lazy dog '.repeat(66)}`;
}

interface Target {
  readonly url: string;
  readonly label: string;
}

async function sendOne(
  agent: Agent,
  target: Target,
  key: BenchKey,
  load: AdmissionLoad,
  sequence: number,
  stream: boolean,
  signal: AbortSignal,
): Promise<Omit<AdmissionSample, 'window' | 'atMs' | 'load'>> {
  const started = performance.now();
  const since = (): number => performance.now() - started;
  try {
    const response = await request(`${target.url}/v1/chat/completions`, {
      method: 'POST',
      dispatcher: agent,
      signal,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key.secret}` },
      body: JSON.stringify({
        model: MODEL,
        messages: [{ role: 'user', content: promptOf(load, sequence) }],
        max_tokens: MAX_TOKENS,
        ...(stream ? { stream: true, stream_options: { include_usage: true } } : {}),
      }),
    });
    if (response.statusCode !== 200) {
      await response.body.text();
      const retryAfter = response.headers['retry-after'] !== undefined;
      return { status: response.statusCode, e2eMs: since(), tokens: 0, retryAfter };
    }
    if (!stream) {
      const usage = ((await response.body.json()) as { usage?: { total_tokens?: number } }).usage;
      return { status: 200, e2eMs: since(), tokens: usage?.total_tokens ?? 0, retryAfter: false };
    }
    const parser = new SseParser();
    const decoder = new TextDecoder();
    let ttftMs: number | undefined;
    let tokens = 0;
    for await (const bytes of response.body) {
      for (const data of parser.push(decoder.decode(bytes as Uint8Array, { stream: true }))) {
        if (data === SSE_DONE) continue;
        if (ttftMs === undefined && eventCarriesOutput({ data })) ttftMs = since();
        const usage = (JSON.parse(data) as { usage?: { total_tokens?: number } | null }).usage;
        if (usage?.total_tokens !== undefined) tokens = usage.total_tokens;
      }
    }
    return { status: 200, e2eMs: since(), tokens, retryAfter: false, ...(ttftMs === undefined ? {} : { ttftMs }) };
  } catch {
    return { status: 0, e2eMs: since(), tokens: 0, retryAfter: false };
  }
}

interface LoadPlan {
  readonly load: AdmissionLoad;
  readonly key: BenchKey;
  /** Mean arrivals per second (Poisson). */
  readonly rate: number;
  readonly stream: boolean;
}

interface Run {
  readonly agent: Agent;
  readonly startedAt: number;
  readonly samples: AdmissionSample[];
  sequence: number;
  /** The flow-controlled routers, whose sheds are counted per window by reason. */
  /** Where the flow-control replicas' /metrics are (their ops listeners). */
  readonly flowRouters: readonly string[];
  readonly shedReasons: Map<string, Map<string, number>>;
}

/** Sends `plans` open-loop to `target` for SETTLE_MS + `durationMs`, then waits for (or aborts) what is still running. */
async function runWindow(
  run: Run,
  window: string,
  target: Target,
  plans: readonly LoadPlan[],
  durationMs: number,
  during: (elapsedMs: number) => Promise<void> = async () => undefined,
): Promise<void> {
  const shedBefore = await shedByReason(run.flowRouters);
  const abort = new AbortController();
  // One listener per request on this signal: thousands, by design.
  setMaxListeners(0, abort.signal);
  const windowStart = performance.now();
  const running: Promise<void>[] = [];
  const outstanding = new Map<AdmissionLoad, number>();
  const nextAt = plans.map(() => windowStart);
  console.log(
    `  ${window}: ${plans.map((plan) => `${plan.load} ${plan.rate.toFixed(1)}/s`).join(', ')} via ${target.label}`,
  );
  // The settling part comes first and on top: `durationMs` is what is counted.
  while (performance.now() - windowStart < SETTLE_MS + durationMs) {
    const now = performance.now();
    plans.forEach((plan, index) => {
      while ((nextAt[index] as number) <= now) {
        nextAt[index] = (nextAt[index] as number) - (Math.log(1 - Math.random()) / plan.rate) * 1_000;
        if ((outstanding.get(plan.load) ?? 0) >= MAX_OUTSTANDING) continue;
        outstanding.set(plan.load, (outstanding.get(plan.load) ?? 0) + 1);
        const atMs = performance.now() - run.startedAt;
        const tag = performance.now() - windowStart < SETTLE_MS ? `${window}-settling` : window;
        const sequence = run.sequence++;
        running.push(
          sendOne(run.agent, target, plan.key, plan.load, sequence, plan.stream, abort.signal).then((result) => {
            outstanding.set(plan.load, (outstanding.get(plan.load) ?? 1) - 1);
            run.samples.push({ ...result, load: plan.load, window: tag, atMs });
          }),
        );
      }
    });
    await during(performance.now() - windowStart);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  const aborter = setTimeout(() => abort.abort(), GRACE_MS);
  await Promise.all(running);
  clearTimeout(aborter);
  const shedAfter = await shedByReason(run.flowRouters);
  const delta = new Map([...shedAfter].map(([reason, count]) => [reason, count - (shedBefore.get(reason) ?? 0)]));
  if ([...delta.values()].some((count) => count > 0)) run.shedReasons.set(window, delta);
}

async function startRouterSet(
  sims: readonly string[],
  redisUrl: string,
  keyFile: string,
  flowControl: boolean,
): Promise<{ routers: ProxyProcess[]; balancer: ProxyProcess }> {
  const flags = [
    '--auth',
    'api-keys',
    '--api-keys-file',
    keyFile,
    flowControl ? '--flow-control' : '--no-flow-control',
    '--flow-max-inflight-per-backend',
    String(SLOTS_PER_BACKEND),
    '--flow-max-queue-wait-ms',
    String(queueWaitMs),
    '--flow-max-queued-requests',
    String(QUEUE_BOUND),
    ...extraRouterArgs,
  ];
  const routers: ProxyProcess[] = [];
  for (let index = 0; index < REPLICAS; index++)
    routers.push(
      await startRouterProcess(sims.join(','), { redisUrl, extraArgs: [...flags, ...ROUTER_PROXY_PROTOCOL_FLAGS] }),
    );
  // PROXY protocol v2, as shipped: the routers see each client's own address behind the balancer.
  const balancer = await startHaproxyProcess(
    routers.map((router) => router.url),
    { proxyProtocol: true },
  );
  return { routers, balancer };
}

async function main(): Promise<void> {
  const haproxy = haproxyVersion();
  if (!haproxy) throw new Error('bench:admission needs HAProxy (/usr/sbin/haproxy): apt-get install -y haproxy');
  // Routers run as deployed (production bundles), and never a bundle older than this tree.
  console.log('Building production bundles (npm run build)…');
  buildBundles();
  const keys = {
    noisy: newBenchKey('noisy-tenant', { weight: 1 }),
    steady: newBenchKey('steady-tenant', { weight: 1 }),
    load: newBenchKey('load-tenant', { weight: 1 }),
  };
  const keyFile = writeBenchKeyFile(Object.values(keys));
  const opened: (() => Promise<void>)[] = [];
  const agent = new Agent({ connections: 4_096, keepAliveTimeout: 60_000 });
  let redis: LocalRedisServer | undefined;
  try {
    console.log(`bench:admission — ${REPLICAS} + ${REPLICAS} routers behind ${haproxy}, ${SIMS} sims`);
    redis = await startLocalRedisServer();
    const redisServer = redis;
    opened.push(() => redisServer.stop());
    const sims = await startLocalSims(SIMS, SIM_ARGS);
    opened.push(() => stopLocalSims(sims));
    const simUrls = sims.map((sim) => sim.url);
    const on = await startRouterSet(simUrls, redis.url, keyFile, true);
    const off = await startRouterSet(simUrls, redis.url, keyFile, false);
    for (const set of [on, off]) {
      opened.push(() => set.balancer.stop());
      for (const router of set.routers) opened.push(() => router.stop());
    }
    const flowOn: Target = { url: on.balancer.url, label: 'flow control on' };
    const flowOff: Target = { url: off.balancer.url, label: 'flow control off' };
    const run: Run = {
      agent,
      startedAt: performance.now(),
      samples: [],
      sequence: 0,
      flowRouters: on.routers.map(metricsUrlOf),
      shedReasons: new Map(),
    };
    const maxQueued = { value: 0 };
    const watchQueues = async (): Promise<void> => {
      const gauges = await scrapeFlowGauges(on.routers.map(metricsUrlOf));
      maxQueued.value = Math.max(maxQueued.value, ...gauges.map((gauge) => gauge.queuedRequests));
    };

    await runWindow(run, 'calibrate', flowOn, [{ load: 'steady', key: keys.steady, rate: 2, stream: true }], 8_000);
    const calibration = run.samples.filter((sample) => sample.window === 'calibrate' && sample.status === 200);
    const meanServiceMs = calibration.reduce((sum, sample) => sum + sample.e2eMs, 0) / calibration.length;
    const throughput = (SIMS * SLOTS_PER_BACKEND) / (meanServiceMs / 1_000);
    console.log(
      `  pool: ${SIMS * SLOTS_PER_BACKEND} slots, mean service ${Math.round(meanServiceMs)} ms → X ≈ ${throughput.toFixed(1)} requests/s`,
    );
    const windows: string[] = [];
    const describe = new Map<string, string>();
    const checks = [];
    if (scenario !== 'overload') {
      const steady: LoadPlan = { load: 'steady', key: keys.steady, rate: steadyShare * throughput, stream: true };
      const noisy: LoadPlan = { load: 'noisy', key: keys.noisy, rate: 10 * 0.5 * throughput, stream: false };
      await runWindow(run, 'alone', flowOn, [steady], windowMs);
      await runWindow(run, 'contended-off', flowOff, [steady, noisy], windowMs);
      await runWindow(run, 'contended', flowOn, [steady, noisy], windowMs, watchQueues);
      let stopped = false;
      await runWindow(run, 'redis-down', flowOn, [steady, noisy], outageMs, async () => {
        if (stopped) return;
        stopped = true;
        await redisServer.stop();
      });
      await redisServer.restart();
      await runWindow(run, 'recovered', flowOn, [steady, noisy], windowMs, watchQueues);
      windows.push('alone', 'contended-off', 'contended', 'redis-down', 'recovered');
      describe.set('alone', 'steady tenant alone (flow control on)');
      describe.set('contended-off', 'noisy tenant at 10× its share, flow control **off** (today)');
      describe.set('contended', 'noisy tenant at 10× its share, flow control on');
      describe.set('redis-down', `the same, Redis stopped (${outageMs / 1_000} s)`);
      describe.set('recovered', 'the same, Redis back');
      const table = figuresByWindow(run.samples, ['alone', 'contended']);
      const alone = table.get('alone')?.get('steady') ?? figuresOf([]);
      const contended = table.get('contended');
      const noisyFigures = contended?.get('noisy') ?? figuresOf([]);
      const steadyFigures = contended?.get('steady') ?? figuresOf([]);
      checks.push(
        ...noisyNeighbourChecks({
          alone,
          contended: { noisy: noisyFigures, steady: steadyFigures },
          noisyFairShare: fairShare(1, 1, demandShare(steadyFigures, noisyFigures.tokens + steadyFigures.tokens)),
        }),
      );
    }
    if (scenario !== 'noisy-neighbour') {
      const waitsBefore = await queueWaitsPast(on.routers.map(metricsUrlOf), queueWaitMs / 1_000);
      const plan = (rate: number): LoadPlan[] => [{ load: 'load', key: keys.load, rate, stream: true }];
      await runWindow(run, 'unloaded', flowOn, plan(0.3 * throughput), windowMs);
      await runWindow(run, 'overload-off', flowOff, plan(2 * throughput), windowMs);
      maxQueued.value = 0;
      await runWindow(run, 'overload', flowOn, plan(2 * throughput), windowMs, watchQueues);
      const waitsAfter = await queueWaitsPast(on.routers.map(metricsUrlOf), queueWaitMs / 1_000);
      windows.push('unloaded', 'overload-off', 'overload');
      describe.set('unloaded', 'one tenant at 0.3 × capacity');
      describe.set('overload-off', '2 × capacity, flow control **off** (today)');
      describe.set('overload', '2 × capacity, flow control on');
      const table = figuresByWindow(run.samples, ['unloaded', 'overload']);
      checks.push(
        ...overloadChecks({
          unloaded: table.get('unloaded')?.get('load') ?? figuresOf([]),
          overloaded: table.get('overload')?.get('load') ?? figuresOf([]),
          waitsPastDeadline: waitsAfter - waitsBefore,
          maxQueued: maxQueued.value,
          queueBound: QUEUE_BOUND,
        }),
      );
    }
    const markdown = [
      `# Admission under a noisy neighbour and overload (${new Date().toISOString()})`,
      '',
      `${REPLICAS} kvroute replicas with flow control on and ${REPLICAS} with it off, each set behind its own ` +
        `HAProxy (TCP), over ${SIMS} vllm-sim (\`${SIM_ARGS.join(' ')}\`), one private redis-server. ` +
        `Capacity ${SLOTS_PER_BACKEND} requests per backend; queue deadline ${queueWaitMs} ms, bound ` +
        `${QUEUE_BOUND} per replica. Pool throughput X ≈ ${throughput.toFixed(1)} requests/s ` +
        `(mean service ${Math.round(meanServiceMs)} ms). Open-loop Poisson load; ${MAX_TOKENS} tokens out, ~600 in.`,
      '',
      renderWindowTable(figuresByWindow(run.samples, windows), (window) => describe.get(window) ?? window),
      '',
      'Requests the flow-controlled routers shed, by reason (their `kvroute_router_flow_shed_total`):',
      '',
      ...[...run.shedReasons].map(
        ([window, reasons]) =>
          `- ${describe.get(window) ?? window}: ${[...reasons].map(([reason, count]) => `${reason} ${count}`).join(', ')}`,
      ),
      '',
      renderChecks(checks),
      '',
    ].join('\n');
    console.log(`\n${markdown}`);
    const stamp = new Date().toISOString().replace(/[:.]/g, '-');
    const into = resultsDir();
    mkdirSync(into, { recursive: true });
    writeFileSync(join(into, `admission-${stamp}.md`), markdown);
    writeFileSync(
      join(into, `admission-${stamp}.json`),
      JSON.stringify({ throughput, meanServiceMs, checks, samples: run.samples }),
    );
    console.log(`results written to ${join(into, `admission-${stamp}`)}.{md,json}`);
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
