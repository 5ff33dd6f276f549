/**
 * Benchmark: how many concurrent streams one vllm-sim process sustains on one core at --time-scale 1
 * before its own CPU adds more than 5 % to TTFT.
 *
 * The sim runs as a child process pinned to core 0 (taskset), this load generator on core 1. For each
 * concurrency level N, N closed-loop clients stream completions for a fixed window. The default
 * workload keeps the engine decoding as many streams as it can (a shared 512-token prefix, 16 unique
 * tokens, 128–384 output tokens; profile h100-8b, max_num_seqs 1024), because SSE writes per token
 * are what costs the simulator CPU. Output lengths vary and clients start staggered over the first
 * second, so streams do not finish and restart in lockstep (a synchronized burst of 1,000 new
 * requests is not a load any real fleet sees).
 *
 * The engine's own TTFT (simulated, what its histogram reports) is what a CPU-free simulator would
 * give. The sim also measures, per request, the wall time from its route handler to the first token
 * written (/sim/state); the difference is what the sim process itself adds (event-loop delay, timer
 * granularity, serialisation): added = (sim wall TTFT − engine TTFT) / engine TTFT. The client's own
 * TTFT and event-loop delay are shown beside it, so client-side limits are visible, not mistaken
 * for the sim's.
 *
 * Usage: npm run bench:sim-capacity -- [--levels 1,64,...] [--seconds 10] [--profile h100-8b]
 *        [--shared-prefix-tokens 512] [--prompt-tokens 16] [--max-tokens 256] [--time-scale 1] [--no-pin]
 * (--time-scale > 1 packs more tokens per wall second into the sim, to find where its CPU gives out.)
 * Writes bench/results/sim-capacity-<time>.json.
 */
import { parseCommandLine } from '@kvroute/platform/command-line';
import { spawnSync } from 'node:child_process';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';

const args = parseCommandLine({
  usage: 'npm run bench:sim-capacity -- [options]',
  summary:
    'How many concurrent requests one simulated backend serves before its CPU gives out.\nWrites bench/results/sim-capacity-<time>.json.',
  allowNegative: true,
  options: {
    levels: {
      type: 'string',
      default: '1,64,128,256,384,512,768,1024',
      value: 'numbers',
      description: 'concurrency levels, closed-loop streaming clients each',
    },
    seconds: { type: 'string', default: '10', value: 'number', description: 'measured window per level' },
    profile: { type: 'string', default: 'h100-8b', description: 'the sim profile' },
    'time-scale': {
      type: 'string',
      default: '1',
      value: 'number',
      description: "the sim's time scale (> 1 packs more tokens per wall second)",
    },
    'shared-prefix-tokens': {
      type: 'string',
      default: '512',
      value: 'number',
      description: 'prefix tokens every prompt shares',
    },
    'prompt-tokens': {
      type: 'string',
      default: '16',
      value: 'number',
      description: 'unique prompt tokens per request',
    },
    'max-tokens': {
      type: 'string',
      default: '256',
      value: 'number',
      description: 'mean output tokens (128\u2013384 by default)',
    },
    threshold: {
      type: 'string',
      default: '0.05',
      value: 'number',
      description: 'TTFT the sim may add before a level counts as beyond capacity (fraction)',
    },
    pin: { type: 'boolean', default: true, description: 'pin the sim to core 0 and this process to core 1 (taskset)' },
  },
});

// Loaded once the command line is accepted: --help, --version and a mistyped flag answer without them.
const { Agent, request } = await import('undici');
const { mean, percentile, syntheticTokenPrompt: tokenPrompt } = await import('@kvroute/workloads');
const { startLocalSims, stopLocalSims } = await import('./local-sims');
const { processCpuSeconds } = await import('./process-cpu');
// Classes also named as types: a type-only import of the name would clash with the const above.
type Agent = InstanceType<typeof Agent>;

const levels = args.levels.split(',').map(Number);
const windowMs = Number(args.seconds) * 1000;
const sharedPrefix = tokenPrompt(Number(args['shared-prefix-tokens']), 999_983);
const promptTokens = Number(args['prompt-tokens']);
const maxTokens = Number(args['max-tokens']);
const threshold = Number(args.threshold);
const repoRoot = join(import.meta.dirname, '..', '..');

interface LevelResult {
  concurrency: number;
  requests: number;
  clientTtftMeanMs: number;
  clientTtftP95Ms: number;
  engineTtftMeanMs: number;
  /** Handler → first token written, measured inside the sim (wall ms). */
  simWallTtftMeanMs: number;
  /** (sim wall TTFT − engine TTFT) / engine TTFT. */
  overheadRatio: number;
  loopLagMeanMs: number;
  /** Handler entry → engine accepted it (validate, template, tokenize), wall ms. */
  admissionMeanMs: number;
  clientLoopDelayP99Ms: number;
  simCpuCoreFraction: number;
  tokensPerSecond: number;
}

async function main(): Promise<void> {
  const hasTaskset = args.pin && spawnSync('taskset', ['--version']).status === 0;
  if (hasTaskset) spawnSync('taskset', ['-pc', '1', String(process.pid)]);
  const [sim] = await startLocalSims(
    1,
    ['--profile', args.profile, '--model', 'bench-model', '--time-scale', args['time-scale']],
    hasTaskset ? { pinToCore: 0 } : {},
  );
  if (!sim) throw new Error('no sim started');
  const url = sim.url;
  try {
    const dispatcher = new Agent({ connections: 2048, pipelining: 1 });
    const results: LevelResult[] = [];
    console.log(
      `vllm-sim capacity: profile ${args.profile}, time-scale ${args['time-scale']}, prompt ${sharedPrefix.length} ` +
        `shared + ${promptTokens} unique tokens, ${maxTokens} output tokens, ${windowMs / 1000} s per ` +
        `level${hasTaskset ? ', sim pinned to core 0' : ' (taskset missing: not pinned)'}`,
    );
    console.log(
      '| streams | requests | engine TTFT mean | sim wall TTFT mean | added by sim | sim admission ' +
        '| sim loop lag | sim CPU (cores) | client TTFT mean / p95 | client loop delay p99 | tokens/s ' +
        '|',
    );
    console.log('|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
    let seed = 1;
    // Warm-up: JIT-compile the request path so the first level measures steady state, not compilation.
    await runLevel(url, dispatcher, sim.process.pid as number, 16, () => seed++, 2_000);
    for (const concurrency of levels) {
      const result = await runLevel(url, dispatcher, sim.process.pid as number, concurrency, () => seed++, windowMs);
      results.push(result);
      console.log(
        `| ${concurrency} | ${result.requests} | ${result.engineTtftMeanMs.toFixed(1)} ms | ${result.simWallTtftMeanMs.toFixed(1)} ` +
          `ms | ${(100 * result.overheadRatio).toFixed(1)} % | ${result.admissionMeanMs.toFixed(2)} ms ` +
          `| ${result.loopLagMeanMs.toFixed(2)} ms | ${result.simCpuCoreFraction.toFixed(2)} | ${result.clientTtftMeanMs.toFixed(1)} ` +
          `/ ${result.clientTtftP95Ms.toFixed(1)} ms | ${result.clientLoopDelayP99Ms.toFixed(1)} ms | ` +
          `${result.tokensPerSecond.toFixed(0)} |`,
      );
      if (result.overheadRatio > 4 * threshold) break;
    }
    await dispatcher.close();
    const sustained = results.filter((result) => result.overheadRatio <= threshold).at(-1);
    const verdict = sustained
      ? `One vllm-sim process on one core sustains ${sustained.concurrency} concurrent streams with ≤ ${threshold * 100} % added TTFT.`
      : `Even the lowest level added more than ${threshold * 100} % TTFT.`;
    console.log(`\n${verdict}`);
    const outDir = join(repoRoot, 'bench', 'results');
    mkdirSync(outDir, { recursive: true });
    const stamp = new Date().toISOString().replaceAll(':', '-').slice(0, 19);
    writeFileSync(
      join(outDir, `sim-capacity-${stamp}.json`),
      JSON.stringify(
        {
          profile: args.profile,
          sharedPrefixTokens: sharedPrefix.length,
          promptTokens,
          maxTokens,
          windowMs,
          results,
          verdict,
        },
        null,
        2,
      ),
    );
    console.log(`results written to bench/results/sim-capacity-${stamp}.json`);
  } finally {
    await stopLocalSims([sim]);
  }
}

async function runLevel(
  url: string,
  dispatcher: Agent,
  simPid: number,
  concurrency: number,
  nextSeed: () => number,
  durationMs: number,
): Promise<LevelResult> {
  const ttfts: number[] = [];
  let tokens = 0;
  const before = await simState(url);
  const clientLoop = monitorEventLoopDelay({ resolution: 5 });
  clientLoop.enable();
  const cpuBefore = processCpuSeconds(simPid);
  const started = performance.now();
  const deadline = started + durationMs;
  await Promise.all(
    Array.from({ length: concurrency }, async (_, worker) => {
      await new Promise((resolve) => setTimeout(resolve, (worker * 997) % Math.min(1000, durationMs / 4)));
      while (performance.now() < deadline) {
        const seed = nextSeed();
        const outputTokens = Math.round(maxTokens * (0.5 + ((seed * 7919) % 1000) / 1000));
        const body = JSON.stringify({
          model: 'bench-model',
          prompt: [...sharedPrefix, ...tokenPrompt(promptTokens, seed)],
          max_tokens: outputTokens,
          stream: true,
        });
        const sent = performance.now();
        const response = await request(`${url}/v1/completions`, {
          method: 'POST',
          body,
          headers: { 'content-type': 'application/json' },
          dispatcher,
        });
        let first = true;
        // Cheap client: find the first content event, then only count bytes, so the client core is not the bottleneck.
        for await (const chunk of response.body) {
          if (first && (chunk as Buffer).includes('"text":"')) {
            ttfts.push(performance.now() - sent);
            first = false;
          }
        }
        tokens += outputTokens;
      }
    }),
  );
  const elapsedSeconds = (performance.now() - started) / 1000;
  const cpuSeconds = processCpuSeconds(simPid) - cpuBefore;
  clientLoop.disable();
  const after = await simState(url);
  const simRequests = after.ttft_requests - before.ttft_requests;
  const engineMean = (after.ttft_engine_ms_total - before.ttft_engine_ms_total) / simRequests;
  const simWallMean = (after.ttft_wall_ms_total - before.ttft_wall_ms_total) / simRequests;
  const clientMean = mean(ttfts);
  return {
    concurrency,
    requests: ttfts.length,
    clientTtftMeanMs: clientMean,
    clientTtftP95Ms: percentile(ttfts, 95),
    engineTtftMeanMs: engineMean,
    simWallTtftMeanMs: simWallMean,
    overheadRatio: (simWallMean - engineMean) / engineMean,
    loopLagMeanMs:
      (after.loop_lag_ms_total - before.loop_lag_ms_total) / Math.max(1, after.loop_lag_steps - before.loop_lag_steps),
    clientLoopDelayP99Ms: clientLoop.percentile(99) / 1e6,
    admissionMeanMs: (after.admission_ms_total - before.admission_ms_total) / simRequests,
    simCpuCoreFraction: cpuSeconds / elapsedSeconds,
    tokensPerSecond: tokens / elapsedSeconds,
  };
}

interface SimState {
  ttft_requests: number;
  ttft_wall_ms_total: number;
  ttft_engine_ms_total: number;
  admission_ms_total: number;
  loop_lag_steps: number;
  loop_lag_ms_total: number;
}

async function simState(url: string): Promise<SimState> {
  return (await (await fetch(`${url}/sim/state`)).json()) as SimState;
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
