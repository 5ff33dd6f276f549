/**
 * Benchmark: how many concurrent streams one vllm-sim process sustains on one core at --time-scale 1
 * before its own CPU adds more than 5 % to TTFT.
 *
 * The sim runs as a child process pinned to core 0 (taskset), this load generator on core 1. For each
 * concurrency level N, N closed-loop clients stream completions for a fixed window. The default
 * workload keeps the engine decoding as many streams as it can (a shared 512-token prefix, 16 unique
 * tokens, 256 output tokens; profile h100-8b, max_num_seqs 1024), because SSE writes per token are
 * what costs the simulator CPU.
 *
 * The engine's own TTFT (simulated, what its histogram reports) is what a CPU-free simulator would
 * give; the client-measured TTFT adds loopback HTTP, timer granularity and whatever the sim's CPU
 * delays. The part that grows with load is the sim's: added(N) = (client − engine)(N) − (client −
 * engine)(1), reported as a fraction of the engine TTFT. The loop lag (how late step results left
 * the sim versus their deadline, from /sim/state) is shown beside it as direct evidence.
 *
 * Usage: npm run bench:sim-capacity -- [--levels 1,64,...] [--seconds 10] [--profile h100-8b]
 *        [--shared-prefix-tokens 512] [--prompt-tokens 16] [--max-tokens 256]
 * Writes bench/results/sim-capacity-<time>.json.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { Agent, request } from 'undici';
import { mean, percentile, syntheticTokenPrompt as tokenPrompt } from '@kvroute/workloads';
import { startLocalSims, stopLocalSims } from './local-sims';

const { values: args } = parseArgs({
  options: {
    levels: { type: 'string', default: '1,64,128,256,384,512,768,1024' },
    seconds: { type: 'string', default: '10' },
    profile: { type: 'string', default: 'h100-8b' },
    'shared-prefix-tokens': { type: 'string', default: '512' },
    'prompt-tokens': { type: 'string', default: '16' },
    'max-tokens': { type: 'string', default: '256' },
    threshold: { type: 'string', default: '0.05' },
  },
});
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
  /** (client − engine) TTFT, ms: HTTP, timers and the sim's CPU. */
  gapMs: number;
  /** Growth of the gap over the 1-stream level, as a fraction of the engine TTFT. */
  overheadRatio: number;
  loopLagMeanMs: number;
  simCpuCoreFraction: number;
  tokensPerSecond: number;
}

async function main(): Promise<void> {
  const hasTaskset = spawnSync('taskset', ['--version']).status === 0;
  if (hasTaskset) spawnSync('taskset', ['-pc', '1', String(process.pid)]);
  const [sim] = await startLocalSims(1, ['--profile', args.profile, '--model', 'bench-model', '--time-scale', '1'], hasTaskset ? { pinToCore: 0 } : {});
  if (!sim) throw new Error('no sim started');
  const url = sim.url;
  try {
    const dispatcher = new Agent({ connections: 2048, pipelining: 1 });
    const results: LevelResult[] = [];
    console.log(
      `vllm-sim capacity: profile ${args.profile}, time-scale 1, prompt ${sharedPrefix.length} shared + ${promptTokens} unique tokens, ${maxTokens} output tokens, ${windowMs / 1000} s per level${hasTaskset ? ', sim pinned to core 0' : ' (taskset missing: not pinned)'}`,
    );
    console.log('| streams | requests | client TTFT mean | p95 | engine TTFT mean | client − engine | added by sim load | loop lag mean | sim CPU (cores) | tokens/s |');
    console.log('|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
    let seed = 1;
    for (const concurrency of levels) {
      const result = await runLevel(url, dispatcher, sim.process.pid as number, concurrency, () => seed++, results[0]?.gapMs);
      results.push(result);
      console.log(
        `| ${concurrency} | ${result.requests} | ${result.clientTtftMeanMs.toFixed(1)} ms | ${result.clientTtftP95Ms.toFixed(1)} ms | ${result.engineTtftMeanMs.toFixed(1)} ms | ${result.gapMs.toFixed(1)} ms | ${(100 * result.overheadRatio).toFixed(1)} % | ${result.loopLagMeanMs.toFixed(2)} ms | ${result.simCpuCoreFraction.toFixed(2)} | ${result.tokensPerSecond.toFixed(0)} |`,
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
      JSON.stringify({ profile: args.profile, sharedPrefixTokens: sharedPrefix.length, promptTokens, maxTokens, windowMs, results, verdict }, null, 2),
    );
    console.log(`results written to bench/results/sim-capacity-${stamp}.json`);
  } finally {
    await stopLocalSims([sim]);
  }
}

async function runLevel(url: string, dispatcher: Agent, simPid: number, concurrency: number, nextSeed: () => number, baselineGapMs: number | undefined): Promise<LevelResult> {
  const ttfts: number[] = [];
  let tokens = 0;
  const before = await engineTtft(url);
  const lagBefore = await loopLag(url);
  const cpuBefore = processCpuSeconds(simPid);
  const started = performance.now();
  const deadline = started + windowMs;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < deadline) {
        const body = JSON.stringify({ model: 'bench-model', prompt: [...sharedPrefix, ...tokenPrompt(promptTokens, nextSeed())], max_tokens: maxTokens, stream: true });
        const sent = performance.now();
        const response = await request(`${url}/v1/completions`, { method: 'POST', body, headers: { 'content-type': 'application/json' }, dispatcher });
        let first = true;
        // Cheap client: find the first content event, then only count bytes, so the client core is not the bottleneck.
        for await (const chunk of response.body) {
          if (first && (chunk as Buffer).includes('"text":"')) {
            ttfts.push(performance.now() - sent);
            first = false;
          }
        }
        tokens += maxTokens;
      }
    }),
  );
  const elapsedSeconds = (performance.now() - started) / 1000;
  const cpuSeconds = processCpuSeconds(simPid) - cpuBefore;
  const after = await engineTtft(url);
  const lagAfter = await loopLag(url);
  const engineMean = ((after.sum - before.sum) / (after.count - before.count)) * 1000;
  const clientMean = mean(ttfts);
  const gapMs = clientMean - engineMean;
  return {
    concurrency,
    requests: ttfts.length,
    clientTtftMeanMs: clientMean,
    clientTtftP95Ms: percentile(ttfts, 95),
    engineTtftMeanMs: engineMean,
    gapMs,
    overheadRatio: (gapMs - (baselineGapMs ?? gapMs)) / engineMean,
    loopLagMeanMs: (lagAfter.totalMs - lagBefore.totalMs) / Math.max(1, lagAfter.steps - lagBefore.steps),
    simCpuCoreFraction: cpuSeconds / elapsedSeconds,
    tokensPerSecond: tokens / elapsedSeconds,
  };
}

async function engineTtft(url: string): Promise<{ sum: number; count: number }> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const sum = Number(/^vllm:time_to_first_token_seconds_sum\{[^}]*\} (\S+)$/m.exec(text)?.[1]);
  const count = Number(/^vllm:time_to_first_token_seconds_count\{[^}]*\} (\S+)$/m.exec(text)?.[1]);
  return { sum, count };
}

async function loopLag(url: string): Promise<{ steps: number; totalMs: number }> {
  const state = (await (await fetch(`${url}/sim/state`)).json()) as { loop_lag_steps: number; loop_lag_ms_total: number };
  return { steps: state.loop_lag_steps, totalMs: state.loop_lag_ms_total };
}

/** utime + stime of a process, in seconds (Linux /proc; the sim's child, the node process under taskset). */
function processCpuSeconds(pid: number): number {
  const pids = [pid, ...childPids(pid)];
  let ticks = 0;
  for (const id of pids) {
    try {
      const fields = readFileSync(`/proc/${id}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
      ticks += Number(fields[11]) + Number(fields[12]);
    } catch {
      // process gone
    }
  }
  return ticks / 100;
}

function childPids(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
