/**
 * Benchmark: where route.lua's time goes (`npm run bench:route-stages`), against a private `redis-server`.
 *
 * route.lua marks the end of each step with a `--#stage <name>` line. This tool records real decisions
 * (cacheaware on the Redis store, the traffic of bench:redis-decision: a shared 256-token system prompt,
 * conversations recorded a turn ago, open leases on every backend), captures the route calls' keys and
 * arguments, and replays them against copies of the composed script cut at each stage (an error in place
 * of the marker): Redis's own usec per call (INFO commandstats) of each cut, minus the cut before, is that
 * step's cost. Cuts run interleaved, `--rounds` times, and the least of the rounds is reported (contention only adds
 * time), with redis-server reniced to -20 where allowed. The full script replays the same lease ids (taken again: idempotent) and
 * chains (already recorded: the search runs, nothing is written). The cuts run as scripts (EVALSHA): their
 * 'definitions' step is what the router's calls, as a Redis Function, skip (its library runs it once).
 *
 * Usage: npm run bench:route-stages -- [--pools 16,1024] [--prompt-tokens 8192] [--calls 200] [--rounds 5]
 */
import { parseCommandLine } from '@kvroute/platform/command-line';
import type { AtomicRule, BackendInfo, RoutingRequest } from '@kvroute/routing';

const args = parseCommandLine({
  usage: 'npm run bench:route-stages -- [options]',
  summary: "Where route.lua's time goes, stage by stage, against a private redis-server.",
  options: {
    pools: { type: 'string', default: '16,1024', value: 'numbers', description: 'pool sizes (backends)' },
    'prompt-tokens': { type: 'string', default: '8192', value: 'number', description: 'prompt size (tokens)' },
    calls: { type: 'string', default: '200', value: 'number', description: 'route calls recorded and replayed' },
    rounds: { type: 'string', default: '5', value: 'number', description: 'replay rounds (the least is reported)' },
  },
});

// Loaded once the command line is accepted: --help, --version and a mistyped flag answer without them.
const { createRedis, defineScript, RedisRoutingState, routeScriptOf, waitUntilReady } = await import(
  '@kvroute/redis-store'
);
const { createPolicy, decide } = await import('@kvroute/routing');
const { startRedis } = await import('@kvroute/testing');
const { backendInfos, buildWorkload, inBatches, POOL, raiseRedisPriority, scriptStats, STATE_DEFAULTS } = await import(
  './decision-workload'
);
// Classes also named as types: a type-only import of the name would clash with the const above.
type RedisRoutingState = InstanceType<typeof RedisRoutingState>;

const pools = args.pools.split(',').map(Number);
const promptTokens = Number(args['prompt-tokens']);
const calls = Number(args.calls);
const rounds = Number(args.rounds);

type Redis = ReturnType<typeof createRedis>;
/** One captured route call: EVALSHA's keys and arguments. */
type Captured = { keys: string[]; argv: (string | number)[] };

/**
 * The composed script cut at each stage marker, in order, then the whole script. A cut raises an error in place
 * of its marker (what ran is timed; the reply is an error), so a marker may sit anywhere, inside a helper too
 * (the first time the script reaches it ends the call); the error costs each cut the same ~1 µs.
 */
function stageCuts(lua: string): { name: string; lua: string }[] {
  const cuts: { name: string; lua: string }[] = [];
  for (const match of lua.matchAll(/^--#stage (\S+)$/gm)) {
    cuts.push({
      name: match[1] as string,
      lua: `${lua.slice(0, match.index)}error('stop')\n${lua.slice(match.index)}`,
    });
  }
  cuts.push({ name: 'record', lua });
  return cuts;
}

async function main(): Promise<void> {
  const server = await startRedis({ fresh: true, logger: () => undefined });
  const control = createRedis(server.url, 'worker');
  const captured: Captured[] = [];
  const policy = createPolicy('cacheaware');
  const rule = policy.atomicRule as AtomicRule;
  const routeScript = routeScriptOf(rule);
  // The router calls route.lua as a Redis Function (FCALL <name>), or by EVALSHA <sha> on a server without them.
  const routeHeads = new Set([routeScript.sha1, routeScript.asFunction?.name]);
  // The request-path client, with each route call's keys and arguments captured.
  const requestPath = new Proxy(createRedis(server.url, 'request-path'), {
    get(target, name, receiver) {
      const value = Reflect.get(target, name, receiver) as unknown;
      if (name !== 'callBuffer' || typeof value !== 'function') return value;
      return (command: string, argv: (string | number)[]) => {
        if (routeHeads.has(String(argv[0]))) {
          const keyCount = Number(argv[1]);
          captured.push({ keys: argv.slice(2, 2 + keyCount) as string[], argv: argv.slice(2 + keyCount) });
        }
        return (value as (...a: unknown[]) => unknown).call(target, command, argv);
      };
    },
  }) as Redis;
  try {
    await waitUntilReady(control);
    const raised = await raiseRedisPriority(await control.info('server'));
    console.log(`redis-server priority ${raised ? 'raised (renice -20)' : 'unchanged'}`);
    console.log(
      `route.lua stages: ${promptTokens}-token prompts, ${calls} calls per cut, ${rounds} rounds (the least of the rounds)`,
    );
    const workload = buildWorkload(promptTokens, calls);
    for (const backendCount of pools) {
      const backends = backendInfos(backendCount);
      await prefill(control, backends, workload.previous);
      const state = new RedisRoutingState({ redis: requestPath, ...STATE_DEFAULTS, nowMs: Date.now });
      captured.length = 0;
      for (const [k, request] of workload.next.entries()) {
        await decideOnce(state, backends, request, `stage-${k}`);
      }
      // The first call of a new member set carries it: replay calls that did not.
      const replay = captured.filter((call) => call.argv[11] === '');
      const cuts = stageCuts(routeScriptOf(rule).lua).map((cut) => ({
        ...cut,
        script: defineScript(cut.name, cut.lua, 9),
      }));
      const usec = new Map<string, number[]>(cuts.map((cut) => [cut.name, []]));
      for (let round = 0; round < rounds; round++) {
        for (const cut of cuts) {
          await control.call('SCRIPT', 'LOAD', cut.script.lua);
          await control.config('RESETSTAT');
          for (const call of replay) {
            await control
              .call('EVALSHA', [cut.script.sha1, call.keys.length, ...call.keys, ...call.argv])
              .catch(() => null);
          }
          const stats = scriptStats(await control.info('commandstats'));
          usec.get(cut.name)?.push(stats.usec / stats.calls);
        }
      }
      console.log(`\n### ${backendCount} backends (${replay.length} calls replayed)\n`);
      console.log('| step (ends at) | µs to the end of it | µs of the step |');
      console.log('|---|---:|---:|');
      let before = 0;
      for (const cut of cuts) {
        const median = Math.min(...(usec.get(cut.name) ?? []));
        console.log(`| ${cut.name} | ${median.toFixed(1)} | ${(median - before).toFixed(1)} |`);
        before = median;
      }
    }
  } finally {
    await requestPath.quit();
    await control.quit();
    await server.stop();
  }
}

async function decideOnce(
  state: RedisRoutingState,
  backends: readonly BackendInfo[],
  request: RoutingRequest,
  leaseId: string,
) {
  await decide(state, {
    pool: POOL,
    request,
    backends,
    policy: createPolicy('cacheaware'),
    context: { nowMs: Date.now(), random: Math.random },
    leaseId,
  });
}

/** A fresh index: one conversation per decision recorded a turn ago (round-robin), 4 open leases per backend. */
async function prefill(
  control: Redis,
  backends: readonly BackendInfo[],
  previous: readonly RoutingRequest[],
): Promise<void> {
  await control.flushall();
  const past = new RedisRoutingState({ redis: control, ...STATE_DEFAULTS, nowMs: () => Date.now() - 30_000 });
  await inBatches(previous, 16, async (request, c) => {
    const owner = (backends[c % backends.length] as BackendInfo).id;
    await past.reserve(POOL, owner, `pre-${c}`, request.blockHashes, 0);
    await past.release(POOL, owner, `pre-${c}`);
  });
  const open = new RedisRoutingState({ redis: control, ...STATE_DEFAULTS, leaseTtlMs: 600_000, nowMs: Date.now });
  await inBatches(backends, 16, async (backend) => {
    for (let j = 0; j < 4; j++) await open.reserve(POOL, backend.id, `open-${backend.id}-${j}`, [], 500);
  });
}

await main();
