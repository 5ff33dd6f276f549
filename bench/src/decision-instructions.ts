/**
 * Benchmark: instructions per decision in redis-server (`npm run bench:decision-instructions`), counted by
 * valgrind's callgrind, so the same code gives the same figure on a busy machine (±0.1 % here) where Redis's
 * own µs (bench:redis-decision) move by tens of percent with whatever else runs.
 *
 * A redis-server is started under `valgrind --tool=callgrind --instr-atstart=no` (needs valgrind; a few
 * seconds of setup). Its index is filled as bench:redis-decision fills it (one conversation per decision
 * recorded a turn ago, round-robin, 4 open leases per backend), then `--calls` real decisions (cacheaware,
 * every backend with engine figures) are made through this checkout's store while their script calls are
 * recorded. Those calls are replayed twice with instrumentation on (the first to settle); the second
 * replay's instruction count over the decisions is the figure: route + release, as Redis executes them.
 * With `--stages`, the decision script is also replayed cut at each of its `--#stage` markers (route.lua),
 * which splits that figure by step; the cuts run as scripts (EVALSHA), so they count the 'definitions' step
 * that the router's calls, as a Redis Function (src/scripts.ts), skip: their last row is the function's total.
 *
 * Portable across commits: a checkout whose store predates route.lua's composition per rule is measured
 * as it is (no stages), so a `git worktree` of an older commit can run this file for a before/after.
 *
 * Usage: npm run bench:decision-instructions -- [--pools 16,1024] [--calls 100] [--prompt-tokens 8192] [--stages] [--keep]
 */
import { parseCommandLine } from '@kvroute/platform/command-line';
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { LuaScript } from '@kvroute/redis-store';
import type { BackendInfo, EngineLoad, RoutingPolicy } from '@kvroute/routing';

const args = parseCommandLine({
  usage: 'npm run bench:decision-instructions -- [options]',
  summary: 'Redis instructions per routing decision (redis-server under callgrind). Needs valgrind.',
  options: {
    pools: { type: 'string', default: '16,1024', value: 'numbers', description: 'pool sizes (backends)' },
    calls: { type: 'string', default: '100', value: 'number', description: 'decisions counted per pool' },
    'prompt-tokens': { type: 'string', default: '8192', value: 'number', description: 'prompt size (tokens)' },
    stages: { type: 'boolean', default: false, description: 'also count each stage of route.lua' },
    keep: { type: 'boolean', default: false, description: 'keep the callgrind files' },
  },
});

// Loaded once the command line is accepted: --help, --version and a mistyped flag answer without them.
const store = await import('@kvroute/redis-store');
const { createPolicy, decide } = await import('@kvroute/routing');
const { findFreePort } = await import('@kvroute/testing');
const { backendInfos, buildWorkload, inBatches, POOL, STATE_DEFAULTS } = await import('./decision-workload');

type Redis = ReturnType<typeof store.createRedis>;

/** A redis-server under callgrind, instrumentation off until asked. */
async function startInstrumentedRedis(): Promise<{
  url: string;
  instructions: () => number;
  on: () => void;
  stop: () => void;
}> {
  const port = await findFreePort();
  const dir = mkdtempSync(join(tmpdir(), 'kvroute-callgrind-'));
  const server = spawn(
    'valgrind',
    [
      '--tool=callgrind',
      '--instr-atstart=no',
      `--callgrind-out-file=${dir}/out.%p`,
      'redis-server',
      '--port',
      String(port),
      '--save',
      '',
      '--appendonly',
      'no',
    ],
    { stdio: 'ignore' },
  );
  const control = (...command: string[]) =>
    spawnSync('callgrind_control', [...command, String(server.pid)], { stdio: 'ignore' });
  let dumps = 0;
  return {
    url: `redis://127.0.0.1:${port}`,
    on: () => control('-i', 'on'),
    /** Instructions since the last dump (callgrind_control -d writes out.<pid>.<n>, its summary line). */
    instructions: () => {
      control('-d');
      dumps++;
      const file = readdirSync(dir).find((name) => name.endsWith(`.${dumps}`));
      const summary = /^summary: (\d+)/m.exec(file === undefined ? '' : readFileSync(join(dir, file), 'utf8'));
      if (!summary) throw new Error(`callgrind wrote no summary for dump ${dumps} in ${dir}`);
      return Number(summary[1]);
    },
    stop: () => {
      server.kill('SIGKILL');
      // --keep: the dumps stay for `callgrind_annotate <dir>/out.<pid>.2` (where a decision's instructions go, by function).
      if (args.keep) console.log(`callgrind dumps kept in ${dir}`);
      else rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The decision script's source: route.lua composed with the rule, or (older stores) route.lua itself. */
function decisionScriptOf(policy: RoutingPolicy): string {
  const compose = (store as Record<string, unknown>)['routeScriptOf'];
  if (typeof compose === 'function') return (compose(policy.atomicRule) as LuaScript).lua;
  return (store.SCRIPTS as unknown as Record<string, LuaScript>)['route']?.lua ?? '';
}

async function measurePool(backendCount: number): Promise<void> {
  const server = await startInstrumentedRedis();
  const control: Redis = store.createRedis(server.url, 'worker');
  /** The script calls of the recorded decisions, as sent (FCALL for a script with a function form, else EVALSHA). */
  const recorded: { command: string; argv: (string | number)[] }[] = [];
  let recording = false;
  const client = new Proxy(store.createRedis(server.url, 'worker'), {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver) as unknown;
      if ((name !== 'call' && name !== 'callBuffer') || typeof value !== 'function') return value;
      return (command: string, argv: (string | number)[]) => {
        if (recording && ['evalsha', 'fcall'].includes(command.toLowerCase()))
          recorded.push({ command, argv: [...argv] });
        return (value as (...a: unknown[]) => unknown).call(target, command, argv);
      };
    },
  }) as Redis;
  try {
    await store.waitUntilReady(control);
    const calls = Number(args.calls);
    const workload = buildWorkload(Number(args['prompt-tokens']), calls);
    const backends = backendInfos(backendCount);
    const past = new store.RedisRoutingState({ redis: control, ...STATE_DEFAULTS, nowMs: () => Date.now() - 30_000 });
    await inBatches(workload.previous, 16, async (request, c) => {
      const owner = (backends[c % backends.length] as BackendInfo).id;
      await past.reserve(POOL, owner, `pre-${c}`, request.blockHashes, 0);
      await past.release(POOL, owner, `pre-${c}`);
    });
    const open = new store.RedisRoutingState({
      redis: control,
      ...STATE_DEFAULTS,
      leaseTtlMs: 600_000,
      nowMs: Date.now,
    });
    await inBatches(backends, 16, async (backend) => {
      for (let j = 0; j < 4; j++) await open.reserve(POOL, backend.id, `open-${backend.id}-${j}`, [], 500);
    });
    const policy = createPolicy('cacheaware');
    const engine = new Map<string, EngineLoad>(
      backends.map((backend, i) => [
        backend.id,
        { kvUsage: (i % 90) / 100, kvCapacityTokens: 100_000, running: 4, waiting: i % 3 },
      ]),
    );
    const state = new store.RedisRoutingState({ redis: client, ...STATE_DEFAULTS, nowMs: Date.now });
    const decideOne = async (k: number, leaseId: string) => {
      const context = { nowMs: Date.now(), random: Math.random };
      const request = workload.next[k % workload.next.length] as (typeof workload.next)[number];
      const { decision } = await decide(state, { pool: POOL, request, backends, policy, context, leaseId, engine });
      if (decision.kind === 'routed') await state.release(POOL, decision.backendId, leaseId);
    };
    // Warm-up until the engine figures are all sent and the member set stored, then the recorded decisions.
    for (let k = 0; k < Math.ceil(backendCount / 128) + 1; k++) await decideOne(k, `warm-${k}`);
    recording = true;
    for (let k = 0; k < calls; k++) await decideOne(k, `decision-${k}`);
    recording = false;
    // The decision's script (its SHA-1 or its function's name) is the first one called.
    const decisionScript = recorded[0]?.argv[0];
    /** Replays the recorded calls; with `sha`, the decisions run that script instead (EVALSHA). */
    const replay = async (sha?: string, only?: 'decisions' | 'releases') => {
      for (const { command, argv } of recorded) {
        const isDecision = argv[0] === decisionScript;
        if (only !== undefined && isDecision !== (only === 'decisions')) continue;
        const call =
          sha !== undefined && isDecision
            ? control.call('EVALSHA', [sha, ...argv.slice(1)])
            : control.call(command, argv);
        await call.catch(() => null);
      }
    };
    server.on();
    await replay();
    server.instructions();
    await replay();
    const perDecision = server.instructions() / calls;
    console.log(
      `${backendCount} backends: ${(perDecision / 1000).toFixed(1)} k instructions per decision (route + release; ${calls} decisions)`,
    );
    if (!args.stages) return;
    const lua = decisionScriptOf(policy);
    const markers = [...lua.matchAll(/^--#stage (\S+)$/gm)];
    if (markers.length === 0) console.log("  (no --#stage markers in this checkout's route.lua)");
    // The floor under the steps: the releases alone, and the decisions' calls to a script that returns at once.
    await replay(undefined, 'releases');
    server.instructions();
    await replay(undefined, 'releases');
    const releases = server.instructions() / calls;
    const bare = String(await control.call('SCRIPT', 'LOAD', 'return 0'));
    await replay(bare, 'decisions');
    server.instructions();
    await replay(bare, 'decisions');
    const bareCall = server.instructions() / calls;
    console.log(
      `\nof which: the release ${(releases / 1000).toFixed(1)} k; the decision's call to a script that returns at once ${(bareCall / 1000).toFixed(1)} k`,
    );
    console.log('\n| step (ends at) | k instructions to its end | k instructions of the step |\n|---|---:|---:|');
    let before = 0;
    for (const marker of markers) {
      // Cut: an error in place of the marker ends the script there (what ran is counted, the reply is an error).
      const cut = `${lua.slice(0, marker.index)}error('stop')\n${lua.slice(marker.index)}`;
      const sha = String(await control.call('SCRIPT', 'LOAD', cut));
      await replay(sha);
      server.instructions();
      await replay(sha);
      const upTo = server.instructions() / calls;
      console.log(`| ${marker[1]} | ${(upTo / 1000).toFixed(1)} | ${((upTo - before) / 1000).toFixed(1)} |`);
      before = upTo;
    }
    console.log(
      `| (the rest) | ${(perDecision / 1000).toFixed(1)} | ${((perDecision - before) / 1000).toFixed(1)} |\n`,
    );
  } finally {
    control.disconnect();
    client.disconnect();
    server.stop();
  }
}

for (const pool of args.pools.split(',').map(Number)) await measurePool(pool);
