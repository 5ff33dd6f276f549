/**
 * Benchmark: LoRA adapters (issue 33, acceptance 1). 16 adapters over 4 vllm-sim engines (`--max-loras 4`: four adapters
 * per batch; `--max-cpu-loras 4`: an adapter swapped out must be loaded again, `--lora-load-ms`), adapter popularity
 * Zipf-distributed, multi-turn conversations. The same workload, routed three ways:
 *
 *   adapter-aware   cacheaware; an adapter's requests in its base model's pool, its load priced per backend from the
 *                   engines' residency (the health poller reads vllm:lora_requests_info)
 *   adapter-blind   cacheaware with `--no-lora-routing`: an adapter is just another model (its own pool)
 *   leastloaded     leastloaded, adapter-blind
 *
 * Every run starts fresh engines, a fresh router (one replica) and poller over one private redis-server (emptied
 * between runs). Figures: TTFT p50/p95 as the client sees it, adapter loads per 1,000 requests (the sims'
 * `kvroute_sim_lora_loads_total`), the engines' prefix-cache hit rate. Three seeds by default.
 *
 * Usage: npm run bench:lora -- [--seeds 3] [--conversations 24] [--turns 4] [--adapters 16] [--zipf 1.1]
 * Needs redis-server. Writes bench/results/lora-<time>.{md,json}.
 */
import type { ChildProcess } from 'node:child_process';
import { parseCommandLine } from '@kvroute/platform/command-line';
import type { LocalRedisServer } from '@kvroute/testing';
import type { LoraRun, LoraSample, LoraVariant } from './lora-report';
import type { ProxyProcess } from './proxy-processes';

const args = parseCommandLine({
  usage: 'npm run bench:lora -- [options]',
  summary:
    'LoRA adapters: adapter-aware cacheaware against adapter-blind cacheaware and leastloaded, 16 ' +
    'adapters over 4 engines.\nNeeds redis-server. Writes bench/results/lora-<time>.{md,json}.',
  options: {
    seeds: { type: 'string', default: '3', value: 'number', description: 'seeds (runs per routing)' },
    conversations: { type: 'string', default: '24', value: 'number', description: 'concurrent conversations' },
    turns: { type: 'string', default: '4', value: 'number', description: 'turns per conversation' },
    adapters: { type: 'string', default: '16', value: 'number', description: 'adapters served' },
    'max-loras': { type: 'string', default: '4', value: 'number', description: "the engines' --max-loras" },
    zipf: { type: 'string', default: '1.1', value: 'number', description: "adapter popularity's Zipf exponent" },
    'time-scale': { type: 'string', default: '1', value: 'number', description: "the engines' --time-scale" },
  },
});

// Loaded once the command line is accepted: --help, --version and a mistyped flag answer without them.
const { createRedis, waitUntilReady } = await import('@kvroute/redis-store');
const { startLocalRedisServer } = await import('@kvroute/testing');
const { seededRandom } = await import('@kvroute/workloads');
const { Agent } = await import('undici');
const { reportCheckedResults } = await import('./checked-results');
const { prefixHitRateOf, streamChatTurn, sumSimCounter } = await import('./chat-turns');
const { startLocalSims, stopLocalProcess, stopLocalSims } = await import('./local-sims');
const { adapterAwareChecks, LORA_VARIANTS, renderLoraTables, zipfSampler } = await import('./lora-report');
const { buildBundles, startRouterProcess } = await import('./proxy-processes');
const { startPoller } = await import('./runner/local-cluster');
const count = (name: string): number => {
  const value = Number(args[name as keyof typeof args]);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`--${name} must be a positive number`);
  return value;
};

const BASE_MODEL = 'lora-base';
const ENGINES = 4;
const ANSWER_TOKENS = 24;
const ADAPTERS = Array.from({ length: count('adapters') }, (_, index) => `adapter-${String(index).padStart(2, '0')}`);
const SIM_ARGS = [
  ...['--profile', 'a100-8b', '--model', BASE_MODEL, '--time-scale', String(count('time-scale'))],
  ...['--lora-modules', ADAPTERS.map((name) => `${name}=/adapters/${name}`).join(',')],
  ...['--max-loras', String(count('max-loras')), '--max-cpu-loras', String(count('max-loras'))],
];
/** How often the poller reads the engines' residency, ms. */
const POLL_INTERVAL_MS = 250;

/** Words from `random`: text no other conversation shares. */
function material(random: () => number, bytes: number, head: string): string {
  const words = ['claim', 'policy', 'invoice', 'ticket', 'refund', 'contract', 'order', 'account', 'region', 'quota'];
  let text = `${head}: `;
  while (text.length < bytes) text += `${words[Math.floor(random() * words.length)]} ${Math.floor(random() * 1000)} `;
  return text;
}

/** Each adapter's own system prompt (a role): conversations of one adapter share it. */
const systemPromptOf = (adapter: string): string =>
  `You are the ${adapter} assistant of the support team. ${'Answer in the house style of this team. '.repeat(40)}`;

async function runOnce(variant: LoraVariant, seed: number, redis: LocalRedisServer): Promise<LoraRun> {
  const sims = await startLocalSims(ENGINES, SIM_ARGS);
  let poller: ChildProcess | undefined;
  let router: ProxyProcess | undefined;
  const agent = new Agent({ connections: 256 });
  try {
    const urls = sims.map((sim) => sim.url);
    poller = await startPoller(redis.url, sims, [
      ...['--interval-ms', String(POLL_INTERVAL_MS), '--scrape-timeout-ms', '200'],
    ]);
    router = await startRouterProcess(urls.join(','), {
      redisUrl: redis.url,
      extraArgs: [
        ...['--routing-headers', 'all'],
        ...(variant === 'leastloaded' ? ['--policy', 'leastloaded'] : []),
        ...(variant === 'adapter-aware' ? [] : ['--no-lora-routing']),
      ],
    });
    const routerUrl = router.url;
    // The residency of the engines' start (adapters loaded from --lora-modules) is not the run's.
    const loadsBefore = await sumSimCounter(sims, 'kvroute_sim_lora_loads_total');
    const pickAdapter = zipfSampler(ADAPTERS.length, count('zipf'), seededRandom(seed * 31));
    const samples: LoraSample[] = [];
    const started = performance.now();
    await Promise.all(
      Array.from({ length: count('conversations') }, async (_, index) => {
        const random = seededRandom(seed * 10_000 + index);
        const adapter = ADAPTERS[pickAdapter()] as string;
        await new Promise((resolve) => setTimeout(resolve, random() * 1_000));
        const messages: object[] = [{ role: 'system', content: systemPromptOf(adapter) }];
        for (let turn = 0; turn < count('turns'); turn++) {
          const bytes = turn === 0 ? 3_000 : 400 + Math.floor(random() * 1_200);
          messages.push({ role: 'user', content: material(random, bytes, `seed ${seed} chat ${index} turn ${turn}`) });
          const answer = await streamChatTurn(agent, routerUrl, {
            model: adapter,
            messages,
            max_tokens: ANSWER_TOKENS,
          });
          samples.push({ ok: answer.ok, ttftMs: answer.ttftMs, adapter });
          messages.push({ role: 'assistant', content: answer.text });
          await new Promise((resolve) => setTimeout(resolve, 100 + random() * 400));
        }
      }),
    );
    const wallMs = performance.now() - started;
    return {
      variant,
      seed,
      samples,
      wallMs,
      adapterLoads: (await sumSimCounter(sims, 'kvroute_sim_lora_loads_total')) - loadsBefore,
      kvHit: (await prefixHitRateOf(sims)) ?? 0,
    };
  } finally {
    await agent.close();
    await router?.stop();
    if (poller !== undefined) await stopLocalProcess({ process: poller });
    await stopLocalSims(sims);
  }
}

/** Empties the run's Redis: every run starts without the previous one's ownership, leases and states. */
async function emptied(url: string): Promise<void> {
  const redis = createRedis(url, 'worker');
  try {
    await waitUntilReady(redis);
    await redis.flushall();
  } finally {
    redis.disconnect();
  }
}

async function main(): Promise<void> {
  console.log('Building production bundles (npm run build)…');
  buildBundles();
  const redis = await startLocalRedisServer();
  const runs: LoraRun[] = [];
  const total = LORA_VARIANTS.length * count('seeds');
  try {
    for (let seed = 1; seed <= count('seeds'); seed++)
      for (const variant of LORA_VARIANTS) {
        await emptied(redis.url);
        const run = await runOnce(variant, seed, redis);
        runs.push(run);
        const ok = run.samples.filter((sample) => sample.ok).length;
        console.log(
          `  [${runs.length}/${total}] seed ${seed} ${variant}: ${ok}/${run.samples.length} ok, ` +
            `${run.adapterLoads} adapter loads, ${(run.wallMs / 1000).toFixed(1)} s`,
        );
      }
  } finally {
    await redis.stop();
  }
  const checks = adapterAwareChecks(runs);
  reportCheckedResults(
    'lora',
    {
      heading: 'LoRA adapters',
      summary:
        `vllm-sim \`${SIM_ARGS.filter((arg) => !arg.includes('/adapters/')).join(' ')}\` × ${ENGINES}, ` +
        `${ADAPTERS.length} adapters (Zipf ${count('zipf')}); ${count('conversations')} concurrent conversations of ` +
        `${count('turns')} turns (an adapter's system prompt, 3,000 bytes, then 400–1,600 bytes a turn), ` +
        `${ANSWER_TOKENS} output tokens per answer. One router replica and a health poller (${POLL_INTERVAL_MS} ms) over ` +
        'Redis; fresh engines per run.',
      tables: renderLoraTables(runs),
    },
    checks,
    { runs },
  );
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});
