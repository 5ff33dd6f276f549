/**
 * Benchmark: prefill/decode disaggregation (issue 32, acceptance 1). The same workload, at equal engine count, served:
 *
 *   aggregated      4 vllm-sim of role both, the router's cacheaware policy
 *   disaggregated   2 prefill + 2 decode vllm-sim (`--pd-role`, vLLM's NixlConnector protocol), cache-aware prefill choice
 *   cache-blind     the same engines, the prefill backend chosen by leastloaded (`--pd-prefill-policy leastloaded`)
 *
 * Every run starts fresh engines and a fresh router (one replica, local state). Workloads (streamed, closed loop per
 * conversation, seeded):
 *   conversation    C conversations of T turns over a shared system prompt; each turn brings `--turn-bytes` of new
 *                   material (a document excerpt, a tool result) and a question, so every turn's uncached part is long
 *                   enough to be split, and the prefill engine that holds the conversation prefills only the new part
 *   long-context    C documents of `--document-bytes`, each asked Q short questions: the first is split, the follow-ups
 *                   stay on the decode engine that pulled the document
 *   agentic         C agent loops: an 8 KB task, then 6 tool results of 300–3,000 bytes, one request each
 * Figures: TTFT and inter-token latency (p50, p95) as the client sees them, output tokens per second, and each side's
 * prefix-cache hit rate (the engines' own counters). Three seeds by default.
 *
 * Usage: npm run bench:pd -- [--seeds 3] [--conversations 8] [--turns 4] [--turn-bytes 6000] [--time-scale 1]
 * Writes bench/results/pd-<time>.{md,json}.
 */
import { parseCommandLine } from '@kvroute/platform/command-line';
import type { PdRun, PdSample, PdVariant } from './pd-report';
import type { ProxyProcess } from './proxy-processes';

const args = parseCommandLine({
  usage: 'npm run bench:pd -- [options]',
  summary:
    'Prefill/decode disaggregation against aggregated serving at equal engine count, with a cache-aware ' +
    'and a cache-blind prefill choice.\nWrites bench/results/pd-<time>.{md,json}.',
  options: {
    seeds: { type: 'string', default: '3', value: 'number', description: 'seeds (runs per workload and serving)' },
    conversations: { type: 'string', default: '8', value: 'number', description: 'concurrent conversations' },
    turns: { type: 'string', default: '4', value: 'number', description: 'turns per conversation' },
    'turn-bytes': { type: 'string', default: '6000', value: 'number', description: 'new material per turn, bytes' },
    'document-bytes': { type: 'string', default: '24000', value: 'number', description: 'long-context documents' },
    questions: { type: 'string', default: '3', value: 'number', description: 'questions per document' },
    // Real time: faster, the engines' prefill shrinks below the proxy's own costs and the comparison measures those.
    'time-scale': { type: 'string', default: '1', value: 'number', description: "the engines' --time-scale" },
    workloads: {
      type: 'string',
      default: 'conversation,long-context,agentic',
      description: 'which workloads (conversation, long-context, agentic)',
    },
  },
});

// Loaded once the command line is accepted: --help, --version and a mistyped flag answer without them.
const { seededRandom } = await import('@kvroute/workloads');
const { Agent } = await import('undici');
const { reportCheckedResults } = await import('./checked-results');
const { prefixHitRateOf, streamChatTurn } = await import('./chat-turns');
const { startLocalSims, stopLocalSims } = await import('./local-sims');
const { cacheAwareCheck, PD_VARIANTS, renderPdTables } = await import('./pd-report');
const { buildBundles, startRouterProcess } = await import('./proxy-processes');
const count = (name: string): number => {
  const value = Number(args[name as keyof typeof args]);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`--${name} must be a positive number`);
  return value;
};

const MODEL = 'pd-model';
const PROFILE = ['--profile', 'a100-8b', '--model', MODEL, '--time-scale', String(count('time-scale'))];
const ANSWER_TOKENS = 32;
/** Tool rounds of an agentic loop after its task. */
const AGENT_TOOL_ROUNDS = 6;
const SYSTEM = `You are the analyst of a research team. ${'Quote the source of every figure you use. '.repeat(50)}`;

/** Words from `random`: text that shares no prefix across seeds and conversations. */
function material(random: () => number, bytes: number, head: string): string {
  const words = [
    'revenue',
    'churn',
    'margin',
    'cohort',
    'pipeline',
    'forecast',
    'region',
    'quarter',
    'segment',
    'ratio',
  ];
  let text = `${head}: `;
  while (text.length < bytes) text += `${words[Math.floor(random() * words.length)]} ${Math.floor(random() * 1000)} `;
  return text;
}

interface Conversation {
  /** The user message of each turn (the assistant's answers are appended as they come). */
  readonly turns: readonly string[];
}

function conversationsOf(workload: string, seed: number): Conversation[] {
  const conversations: Conversation[] = [];
  for (let index = 0; index < count('conversations'); index++) {
    const random = seededRandom(seed * 10_000 + index);
    if (workload === 'conversation') {
      conversations.push({
        turns: Array.from(
          { length: count('turns') },
          (_, turn) =>
            `${material(random, count('turn-bytes'), `seed ${seed} conversation ${index} excerpt ${turn}`)}\nWhat changed?`,
        ),
      });
    } else if (workload === 'agentic') {
      // An agent loop: its task, then tool results of 300–3,000 bytes, one a request: some long enough to split,
      // most prefilled by the decode engine that holds the loop (cached-enough).
      const task = material(random, 8_000, `seed ${seed} agent ${index} task`);
      conversations.push({
        turns: [
          `${task}\nPlan the steps.`,
          ...Array.from(
            { length: AGENT_TOOL_ROUNDS },
            (_, round) => `${material(random, 300 + Math.floor(random() * 2_700), `tool result ${round}`)}\nNext step?`,
          ),
        ],
      });
    } else {
      const document = material(random, count('document-bytes'), `seed ${seed} document ${index}`);
      conversations.push({
        turns: [
          `${document}\nSummarise it.`,
          ...Array.from({ length: count('questions') - 1 }, (_, q) => `Question ${q + 1}: and the margin?`),
        ],
      });
    }
  }
  return conversations;
}

async function runOnce(workload: string, variant: PdVariant, seed: number): Promise<PdRun> {
  const disaggregated = variant !== 'aggregated';
  const prefill = disaggregated ? await startLocalSims(2, [...PROFILE, '--pd-role', 'prefill']) : [];
  const decode = await startLocalSims(
    disaggregated ? 2 : 4,
    disaggregated ? [...PROFILE, '--pd-role', 'decode'] : PROFILE,
  );
  let router: ProxyProcess | undefined;
  const agent = new Agent({ connections: 256 });
  try {
    const backends = decode.map((sim) => sim.url).join(',');
    const extraArgs = disaggregated
      ? ['--prefill-backends', prefill.map((sim) => sim.url).join(','), '--decode-backends', backends]
      : [];
    if (variant === 'cache-blind') extraArgs.push('--pd-prefill-policy', 'leastloaded');
    // Disaggregated, the decode engines come from --decode-backends alone.
    router = await startRouterProcess(disaggregated ? '' : backends, {
      extraArgs: [...extraArgs, '--routing-headers', 'all'],
    });
    const routerUrl = router.url;
    const samples: PdSample[] = [];
    const started = performance.now();
    await Promise.all(
      conversationsOf(workload, seed).map(async (conversation, index) => {
        const random = seededRandom(seed * 7_919 + index);
        await new Promise((resolve) => setTimeout(resolve, random() * 1_000));
        const messages: object[] = [{ role: 'system', content: SYSTEM }];
        for (const content of conversation.turns) {
          messages.push({ role: 'user', content });
          const turn = await streamChatTurn(agent, routerUrl, { model: MODEL, messages, max_tokens: ANSWER_TOKENS });
          const { text, ok, ttftMs, gapsMs, outputTokens } = turn;
          samples.push({
            ok,
            ttftMs,
            gapsMs,
            outputTokens,
            disaggregated: turn.headers['x-router-prefill-backend'] !== undefined,
          });
          messages.push({ role: 'assistant', content: text });
          await new Promise((resolve) => setTimeout(resolve, 100 + random() * 300));
        }
      }),
    );
    const wallMs = performance.now() - started;
    return {
      workload,
      variant,
      seed,
      samples,
      wallMs,
      kvHit: { prefill: await prefixHitRateOf(prefill), decode: await prefixHitRateOf(decode) },
    };
  } finally {
    await agent.close();
    await router?.stop();
    await stopLocalSims([...prefill, ...decode]);
  }
}

async function main(): Promise<void> {
  console.log('Building production bundles (npm run build)…');
  buildBundles();
  const workloads = String(args.workloads).split(',');
  const runs: PdRun[] = [];
  const total = workloads.length * PD_VARIANTS.length * count('seeds');
  for (const workload of workloads)
    for (let seed = 1; seed <= count('seeds'); seed++)
      for (const variant of PD_VARIANTS) {
        const run = await runOnce(workload, variant, seed);
        runs.push(run);
        const ok = run.samples.filter((sample) => sample.ok);
        console.log(
          `  [${runs.length}/${total}] ${workload} seed ${seed} ${variant}: ${ok.length}/${run.samples.length} ok, ` +
            `${ok.filter((sample) => sample.disaggregated).length} split, ${(run.wallMs / 1000).toFixed(1)} s`,
        );
      }
  const checks = workloads.includes('conversation') ? [cacheAwareCheck(runs, 'conversation')] : [];
  reportCheckedResults(
    'pd',
    {
      heading: 'Prefill/decode disaggregation',
      summary:
        `vllm-sim \`${PROFILE.join(' ')}\`; aggregated: 4 engines of role both; disaggregated: 2 prefill + 2 decode ` +
        `(NIXL protocol). ${count('conversations')} concurrent conversations per run; ${ANSWER_TOKENS} output tokens per ` +
        `answer; conversation: ${count('turns')} turns of ${count('turn-bytes')} new bytes; long-context: ` +
        `${count('document-bytes')}-byte documents, ${count('questions')} questions each. One router replica, fresh engines per run.`,
      tables: renderPdTables(runs),
    },
    checks,
    { runs },
  );
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});
