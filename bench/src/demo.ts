/**
 * `npm run demo`: what kvroute is for, live, on simulated backends, in about a minute.
 *
 * Runs bench/scenarios/demo.yaml with the benchmark runner: Redis (KVROUTE_REDIS_URL, else a local
 * redis-server, else in-memory state with one router), 4 vllm-sim backends, the health poller, and
 * per policy 2 fresh router replicas on cold caches; the same conversations go through each policy.
 * Prints the table, writes the report to bench/results/demo/ and says whether cache-aware routing won.
 */
import { join } from 'node:path';
import { parseCommandLine } from '@kvroute/platform/command-line';
import { resultsDir } from './app-process';
import type { PolicySummary } from './report';

const USAGE = `npm run demo -- [options]   (installed: kvroute demo [options])

  Runs the demo scenario on this machine: Redis (KVROUTE_REDIS_URL, else a local redis-server, else
  in-memory state with one router), 4 simulated vLLM backends, the health poller and 2 router replicas
  per policy; the same multi-turn conversations through each policy; TTFT and KV-cache hits compared.

  --policies a,b   only these policies (default: the scenario's)
  --seed N         the workload's seed (default 1)
  --out DIR        where report.html and results.json go (default ${join(resultsDir(), 'demo')})
  -h, --help       this text
  --version        the version and commit of this build`;

const args = parseCommandLine({
  usage: 'npm run demo -- [options]',
  helpText: USAGE,
  options: {
    policies: { type: 'string' },
    seed: { type: 'string', default: '1', value: 'number' },
    out: { type: 'string', default: join(resultsDir(), 'demo') },
  },
});

// Loaded once the command line is accepted: --help, --version and a mistyped flag answer without them.
const { policyVerdict, terminalReport } = await import('./report');
const { LocalCluster } = await import('./runner/local-cluster');
const { ProgressBar } = await import('./runner/progress');
const { createClientAgent } = await import('./runner/request-client');
const { runScenario } = await import('./runner/run-scenario');
const { loadScenario } = await import('./runner/scenario');
const { writeReports } = await import('./runner/write-reports');

const log = (line: string): void => void process.stderr.write(`${line}\n`);

async function main(): Promise<void> {
  const scenario = await loadScenario('demo');
  log(`kvroute demo: ${scenario.description}`);
  const cluster = await LocalCluster.start(scenario, { redisUrl: process.env['KVROUTE_REDIS_URL'], log });
  const agent = createClientAgent();
  const stop = (): void => {
    void agent
      .destroy()
      .then(() => cluster.close())
      .finally(() => process.exit(130));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    log(
      `routers per policy: ${cluster.routerCount}${cluster.redisUrl ? ` sharing Redis (${cluster.redisSource})` : ' (no Redis: in-memory state)'}`,
    );
    const results = await runScenario(scenario, {
      target: cluster,
      agent,
      progress: new ProgressBar({
        isTTY: process.stderr.isTTY === true,
        write: (text) => void process.stderr.write(text),
      }),
      workloadInputs: {
        timeScale: scenario.cluster.timeScale,
        dataDir: '',
        readText: () => Promise.reject(new Error('the demo replays no trace')),
      },
      log,
      policies: args.policies?.split(','),
      seeds: [Number(args.seed)],
    });
    const written = await writeReports(args.out, scenario, results, { mode: 'demo' });
    process.stdout.write(`\n${terminalReport(written.summary)}\n`);
    process.stdout.write(
      'TTFT: client-side, streaming, first content token. KV hit %: cached ÷ prompt tokens as the backends reported them.\n',
    );
    const point = written.summary.points[0];
    const find = (policy: string): PolicySummary | undefined =>
      point?.policies.find((summary) => summary.policy === policy);
    const verdict = policyVerdict(find('cacheaware'), find('roundrobin'));
    if (verdict) process.stdout.write(`${verdict}\n`);
    process.stdout.write(`\nreport: ${written.html}\n`);
  } finally {
    await cluster.close();
    await agent.close();
  }
}

main().catch((error: unknown) => {
  process.stderr.write(`demo: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
