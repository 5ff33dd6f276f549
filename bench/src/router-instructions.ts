/**
 * Benchmark: the router's CPU cost per request as **instructions**, counted by valgrind's callgrind,
 * this checkout against another (`--baseline DIR`, e.g. a worktree of the commit before a change).
 *
 * Why: on a shared, noisy machine `bench:overhead`'s CPU-time figures move ±15 % between runs with
 * nothing changed, more than a 10 % budget. An instruction count depends on the program and its
 * input, not on what else the machine does, so one sitting compares two routers without the machine's
 * noise (the run-to-run spread is printed). The program's own noise remains: V8's optimizing compiler runs
 * beside the requests and is counted with them, and does not settle at the same point in every run (the same
 * build gave 1,170 to 1,479 k instructions per small-json request in three runs at `--warmup 6000`,
 * 2026-12-07): compare medians of `--repeats 3` or more, and read a difference under ~10 % as none.
 * Instructions are not time (cache misses, syscalls' kernel side and I/O waits are not in them), so this
 * complements `bench:overhead`; it does not replace it.
 *
 * For each workload (bench:overhead's small-json and small-sse: POST /v1/chat/completions, ~100-byte
 * prompts, every one different, max_tokens 16) and path (kvroute: local state; kvroute-redis: a
 * private redis-server), for this checkout and the baseline, `--repeats` times:
 *   1. `valgrind --tool=callgrind --instr-atstart=no node <checkout>/dist/router.mjs …` over one vllm-sim
 *      (not under valgrind); instrumentation is off while Node starts and while `--warmup` requests
 *      (default 400) let V8 compile the hot path;
 *   2. `callgrind_control -i on`, then `--requests` (default 600) at `--connections` (4) at once, dump;
 *   3. the same wall time with no requests, dump: the timers' own instructions (heartbeats, refreshes),
 *      subtracted. Caveat: a garbage collection the load left for later falls into this window and is
 *      subtracted too, on both sides alike; a change that only allocates more can look cheaper than it is.
 * Per request = (load − idle) ÷ requests. Caveat: after the default 400 warm-up requests V8's optimizing compiler is
 * still at work, ~60 % of the instructions counted (2026-12-07, callgrind_annotate of a kept profile); for a
 * steady-state figure give `--warmup 4000 --requests 1000` (both sides alike). Needs `npm run build` in both
 * checkouts (dist/router.mjs),
 * valgrind and redis-server. ~1 min per run under valgrind; 2 workloads × 2 paths × 2 checkouts × 2
 * repeats ≈ 16 min. Writes bench/results/router-instructions-<time>.{json,md}.
 *
 * `--baseline-args="…"` (with `=`: the value starts with a dash) adds router flags to the baseline's runs, and without `--baseline` the baseline
 * is this checkout itself: e.g. `--baseline-args="--learn-from-responses=false --calibrate-cost-model=false
 * --request-stream-usage=false"` measures what a feature costs, with the same code on both sides.
 *
 * `--checkout DIR` measures another built checkout in this one's place (two older commits compared).
 *
 * Usage: npm run bench:instructions -- [--checkout DIR] [--baseline DIR] [--baseline-args="FLAGS"] [--paths kvroute,kvroute-redis]
 *        [--workloads small-json,small-sse] [--repeats 2] [--requests 600] [--warmup 400] [--connections 4] [--keep-profiles DIR]
 *
 * `--keep-profiles DIR` keeps each run's load dump as DIR/<side>-<path>-<workload>-<repeat>.callgrind, for
 * `callgrind_annotate --inclusive=yes` (V8's builtins and Node's C++ are named; JIT-compiled JavaScript is not).
 */
import { parseCommandLine } from '@kvroute/platform/command-line';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { TestRedis } from '@kvroute/testing';
import type { LocalSim } from './local-sims';
import type { Workload } from './overhead-report';

const args = parseCommandLine({
  usage: 'npm run bench:instructions -- [options]',
  summary: 'CPU instructions per request (callgrind) of the router, against a baseline checkout.\nNeeds valgrind.',
  options: {
    checkout: { type: 'string', description: "a built checkout measured in this one's place" },
    baseline: { type: 'string', description: 'the checkout compared against (default: this one)' },
    'baseline-args': { type: 'string', description: 'router flags for the baseline (--baseline-args="FLAGS")' },
    paths: { type: 'string', default: 'kvroute,kvroute-redis', description: 'kvroute, kvroute-redis' },
    workloads: { type: 'string', default: 'small-json,small-sse', description: 'small-json, small-sse' },
    repeats: { type: 'string', default: '2', value: 'number', description: 'runs per workload, path and checkout' },
    requests: { type: 'string', default: '600', value: 'number', description: 'requests counted per run' },
    warmup: { type: 'string', default: '400', value: 'number', description: 'requests before counting' },
    connections: { type: 'string', default: '4', value: 'number', description: 'requests at once' },
    'keep-profiles': { type: 'string', description: 'keep each load dump in this folder' },
  },
});

// Loaded once the command line is accepted: --help, --version and a mistyped flag answer without them.
const { Pool } = await import('undici');
const { findFreePorts, startRedis } = await import('@kvroute/testing');
const { startLocalSims, stopLocalSims } = await import('./local-sims');
const { median, WORKLOADS } = await import('./overhead-report');

const repoRoot = join(import.meta.dirname, '..', '..');
const MODEL = 'bench-model';
const MAX_TOKENS = 16;
const PATHS = ['kvroute', 'kvroute-redis'] as const;
type PathId = (typeof PATHS)[number];
const READY_TIMEOUT_MS = 180_000;

const count = (name: string, text: string | undefined): number => {
  const value = Number(text);
  if (!Number.isInteger(value) || value <= 0) throw new Error(`--${name} must be a positive integer, got ${text}`);
  return value;
};

interface Checkout {
  readonly label: 'this checkout' | 'baseline';
  readonly dir: string;
  /** Router flags added to this side's runs (`--baseline-args`). */
  readonly extraArgs: readonly string[];
}

interface RunResult {
  readonly checkout: Checkout['label'];
  readonly path: PathId;
  readonly workload: string;
  readonly repeat: number;
  readonly loadInstructions: number;
  readonly idleInstructions: number;
  readonly requests: number;
  readonly failed: number;
  readonly instructionsPerRequest: number;
}

/** Every prompt different and the unique part first, as bench/wrk/chat-completions.lua makes them. */
function body(workload: Workload, run: string, index: number): string {
  const head = `r${run}n${index} `;
  const filler = 'route the prefix cache block token queue batch decode prefill engine fleet '.repeat(
    Math.ceil(workload.promptBytes / 70) + 1,
  );
  const content = (head + filler).slice(0, Math.max(workload.promptBytes, head.length));
  return JSON.stringify({
    model: MODEL,
    messages: [{ role: 'user', content }],
    max_tokens: MAX_TOKENS,
    stream: workload.stream,
  });
}

/** Sends `total` requests, `connections` at a time; counts those not answered 200 with a full body. */
async function drive(
  url: string,
  workload: Workload,
  run: string,
  total: number,
  connections: number,
): Promise<number> {
  const pool = new Pool(url, { connections, pipelining: 1 });
  let next = 0;
  let failed = 0;
  try {
    await Promise.all(
      Array.from({ length: connections }, async () => {
        while (next < total) {
          const index = next++;
          try {
            const response = await pool.request({
              path: '/v1/chat/completions',
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: body(workload, run, index),
              headersTimeout: 60_000,
              bodyTimeout: 60_000,
            });
            const text = await response.body.text();
            if (response.statusCode !== 200 || (workload.stream && !text.includes('[DONE]'))) failed++;
          } catch {
            failed++;
          }
        }
      }),
    );
  } finally {
    await pool.close();
  }
  return failed;
}

function callgrindControl(pid: number, option: string): void {
  const result = spawnSync('callgrind_control', [option, String(pid)], { encoding: 'utf8', timeout: 60_000 });
  if (result.status !== 0)
    throw new Error(`callgrind_control ${option} ${pid} failed: ${(result.stderr || result.stdout).trim()}`);
}

/** Dumps the counters since the last zeroing and returns the total instructions (Ir) of that dump. */
function dumpInstructions(pid: number, outDir: string, dumpsSoFar: number): number {
  callgrindControl(pid, '--dump');
  const name = `callgrind.out.${pid}.${dumpsSoFar + 1}`;
  const path = join(outDir, name);
  if (!existsSync(path)) throw new Error(`callgrind wrote no ${name} (have: ${readdirSync(outDir).join(', ')})`);
  const text = readFileSync(path, 'utf8');
  const total = /^(?:summary|totals):\s+(\d+)/m.exec(text);
  if (!total) throw new Error(`${name}: no summary line`);
  return Number(total[1]);
}

async function waitReady(url: string, child: ChildProcess, output: () => string): Promise<void> {
  const deadline = Date.now() + READY_TIMEOUT_MS;
  while (Date.now() < deadline) {
    if (child.exitCode !== null)
      throw new Error(`router under valgrind exited (${child.exitCode}): ${output().slice(-2_000)}`);
    try {
      if ((await fetch(`${url}/readyz`)).status === 200) return;
    } catch {
      // not listening yet
    }
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  throw new Error(`router under valgrind not ready in ${READY_TIMEOUT_MS / 1_000} s`);
}

async function measure(
  checkout: Checkout,
  path: PathId,
  workload: Workload,
  repeat: number,
  sim: LocalSim,
  redis: TestRedis | undefined,
  options: { requests: number; warmup: number; connections: number; keepProfilesIn?: string },
): Promise<RunResult> {
  const bundle = join(checkout.dir, 'dist', 'router.mjs');
  if (!existsSync(bundle)) throw new Error(`${bundle} is missing: run npm run build in ${checkout.dir}`);
  const outDir = mkdtempSync(join(tmpdir(), 'kvroute-callgrind-'));
  const [port, opsPort] = (await findFreePorts(2)) as [number, number];
  const routerArgs = [
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    '--backends',
    sim.url,
    '--policy',
    'cacheaware',
    '--log-level',
    'warn',
    ...(path === 'kvroute-redis' && redis ? ['--redis-url', `${redis.url}/${repeat % 8}`] : []),
    ...checkout.extraArgs,
  ];
  const child = spawn(
    'valgrind',
    [
      '--tool=callgrind',
      '--instr-atstart=no',
      `--callgrind-out-file=${join(outDir, 'callgrind.out.%p')}`,
      process.execPath,
      bundle,
      ...routerArgs,
    ],
    // The ops port by env: a checkout from before the ops listener ignores it (an unknown flag would stop it).
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, KVROUTE_OPS_PORT: String(opsPort) } },
  );
  let output = '';
  const keep = (chunk: Buffer): void => void (output = (output + chunk.toString('utf8')).slice(-8_000));
  child.stdout?.on('data', keep);
  child.stderr?.on('data', keep);
  const url = `http://127.0.0.1:${port}`;
  try {
    await waitReady(url, child, () => output);
    const pid = child.pid as number;
    const run = `${checkout.label === 'baseline' ? 'b' : 'a'}${path}${workload.id}${repeat}`;
    const warmFailed = await drive(url, workload, `${run}w`, options.warmup, options.connections);
    if (warmFailed > 0) throw new Error(`${warmFailed} of ${options.warmup} warm-up requests failed`);
    callgrindControl(pid, '--instr=on');
    callgrindControl(pid, '--zero');
    const startedAt = performance.now();
    const failed = await drive(url, workload, run, options.requests, options.connections);
    const loadMs = performance.now() - startedAt;
    const loadInstructions = dumpInstructions(pid, outDir, 0);
    // The same wall time idle: what the router's timers cost on their own.
    await new Promise((resolve) => setTimeout(resolve, loadMs));
    const idleInstructions = dumpInstructions(pid, outDir, 1);
    const served = options.requests - failed;
    return {
      checkout: checkout.label,
      path,
      workload: workload.id,
      repeat,
      loadInstructions,
      idleInstructions,
      requests: options.requests,
      failed,
      instructionsPerRequest: served > 0 ? (loadInstructions - idleInstructions) / served : Number.NaN,
    };
  } finally {
    if (child.exitCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      const killer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      await exited;
      clearTimeout(killer);
    }
    if (options.keepProfilesIn !== undefined) {
      // The load dump (…1) per run, named by side/path/workload/repeat: `callgrind_annotate` shows where the instructions went.
      mkdirSync(options.keepProfilesIn, { recursive: true });
      for (const name of readdirSync(outDir).filter((file) => file.endsWith('.1'))) {
        copyFileSync(
          join(outDir, name),
          join(
            options.keepProfilesIn,
            `${checkout.label === 'baseline' ? 'baseline' : 'this'}-${path}-${workload.id}-${repeat}.callgrind`,
          ),
        );
      }
    }
    rmSync(outDir, { recursive: true, force: true });
  }
}

/** The markdown table: per workload and path, instructions per request of each checkout (median, range) and their ratio. */
function renderInstructions(results: readonly RunResult[], header: readonly string[]): string {
  const lines = [
    ...header,
    '',
    '| workload | path | this checkout, instructions/request | baseline | this ÷ baseline | runs |',
    '|---|---|---:|---:|---:|---:|',
  ];
  const keys = [...new Set(results.map((result) => `${result.workload}\u0000${result.path}`))];
  for (const key of keys) {
    const [workload, path] = key.split('\u0000') as [string, string];
    const of = (checkout: RunResult['checkout']) =>
      results
        .filter((result) => result.workload === workload && result.path === path && result.checkout === checkout)
        .map((result) => result.instructionsPerRequest);
    const cell = (values: readonly number[]) =>
      values.length === 0
        ? '—'
        : `${Math.round(median(values)).toLocaleString('en-US')} (${values.map((value) => Math.round(value / 1_000)).join(', ')} k)`;
    const mine = of('this checkout');
    const theirs = of('baseline');
    const ratio = mine.length > 0 && theirs.length > 0 ? `${(median(mine) / median(theirs)).toFixed(3)}` : '—';
    lines.push(
      `| ${workload} | ${path} | ${cell(mine)} | ${cell(theirs)} | ${ratio} | ${mine.length} + ${theirs.length} |`,
    );
  }
  return `${lines.join('\n')}\n`;
}

async function main(): Promise<void> {
  for (const tool of ['valgrind', 'callgrind_control']) {
    if (spawnSync(tool, ['--version'], { encoding: 'utf8' }).status !== 0)
      throw new Error(`bench:instructions needs ${tool} (apt-get install -y valgrind)`);
  }
  const paths = (args.paths ?? '').split(',').filter(Boolean) as PathId[];
  const unknownPath = paths.find((path) => !PATHS.includes(path));
  if (unknownPath !== undefined || paths.length === 0) throw new Error(`--paths: choose from ${PATHS.join(', ')}`);
  const workloads = (args.workloads ?? '')
    .split(',')
    .map((id) => WORKLOADS.find((workload) => workload.id === id) ?? id);
  const unknownWorkload = workloads.find((workload) => typeof workload === 'string');
  if (unknownWorkload !== undefined)
    throw new Error(
      `--workloads: unknown ${String(unknownWorkload)}; choose from ${WORKLOADS.map((workload) => workload.id).join(', ')}`,
    );
  const options = {
    requests: count('requests', args.requests),
    warmup: count('warmup', args.warmup),
    connections: count('connections', args.connections),
    keepProfilesIn: args['keep-profiles'] === undefined ? undefined : resolve(args['keep-profiles']),
  };
  const repeats = count('repeats', args.repeats);
  const baselineArgs = (args['baseline-args'] ?? '').split(/\s+/).filter(Boolean);
  const measuredDir = args.checkout ? resolve(args.checkout) : repoRoot;
  const baselineDir = args.baseline ? resolve(args.baseline) : baselineArgs.length > 0 ? measuredDir : undefined;
  const checkouts: Checkout[] = [
    { label: 'this checkout', dir: measuredDir, extraArgs: [] },
    ...(baselineDir === undefined ? [] : [{ label: 'baseline' as const, dir: baselineDir, extraArgs: baselineArgs }]),
  ];
  const valgrindVersion = spawnSync('valgrind', ['--version'], { encoding: 'utf8' }).stdout.trim();
  const commits = checkouts.map(
    (checkout) =>
      `${checkout.label}: ` +
      spawnSync('git', ['-C', checkout.dir, 'log', '-1', '--format=%h %s'], { encoding: 'utf8' })
        .stdout.trim()
        .slice(0, 100) +
      (checkout.extraArgs.length > 0 ? ` — with ${checkout.extraArgs.join(' ')}` : ''),
  );

  const sims = await startLocalSims(1, ['--profile', 'fast', '--model', MODEL]);
  const sim = sims[0] as LocalSim;
  let redis: TestRedis | undefined;
  const results: RunResult[] = [];
  try {
    if (paths.includes('kvroute-redis'))
      redis = await startRedis({ fresh: true, logger: (line) => console.log(`  ${line}`) });
    const total = (workloads as Workload[]).length * paths.length * checkouts.length * repeats;
    let done = 0;
    for (let repeat = 1; repeat <= repeats; repeat++) {
      for (const workload of workloads as Workload[]) {
        for (const path of paths) {
          // Alternate which checkout goes first, so neither always runs on the fresher Redis or sim.
          for (const checkout of repeat % 2 === 1 ? checkouts : [...checkouts].reverse()) {
            const startedAt = Date.now();
            const result = await measure(checkout, path, workload, repeat, sim, redis, options);
            results.push(result);
            done++;
            console.log(
              `  [${done}/${total}] ${workload.id} ${path} ${checkout.label} #${repeat}: ` +
                `${Math.round(result.instructionsPerRequest).toLocaleString('en-US')} ` +
                `instructions/request (idle ${(result.idleInstructions / 1e6).toFixed(0)} M of ${(result.loadInstructions / 1e6).toFixed(0)} ` +
                `M; ${result.failed} failed; ${((Date.now() - startedAt) / 1_000).toFixed(0)} s)`,
            );
          }
        }
      }
    }
  } finally {
    await redis?.stop();
    await stopLocalSims(sims);
  }
  const header = [
    `# Router instructions per request (${new Date().toISOString()})`,
    '',
    `callgrind (${valgrindVersion}), Node ${process.version}; ${options.warmup} warm-up requests ` +
      `uninstrumented, then ${options.requests} at ${options.connections} at once, minus the same ` +
      `wall time idle. ${repeats} run(s) per cell: median (each run, thousands).`,
    ...commits.map((line) => `- ${line}`),
  ];
  const markdown = renderInstructions(results, header);
  console.log(`\n${markdown}`);
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  const resultsDir = join(repoRoot, 'bench', 'results');
  mkdirSync(resultsDir, { recursive: true });
  writeFileSync(join(resultsDir, `router-instructions-${stamp}.md`), markdown);
  writeFileSync(
    join(resultsDir, `router-instructions-${stamp}.json`),
    JSON.stringify({ options, repeats, commits, results }, null, 1),
  );
  console.log(`results written to bench/results/router-instructions-${stamp}.{md,json}`);
  if (results.some((result) => result.failed > 0)) process.exitCode = 1;
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});
