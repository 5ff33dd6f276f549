/**
 * Benchmark: what one health-poller replica costs per scrape (`npm run bench:poller`), for
 * docs/scaling.md. `--backends` sims (`--profile fast`), one poller scraping each every
 * `--interval-ms` over a private redis-server (its BullMQ schedule and the published backend state), for
 * `--seconds` after a 5 s warm-up; the poller's, Redis's and the sims' CPU time from /proc, divided by
 * the scrapes the poller counted (`kvroute_poller_scrapes_total`) in that window.
 *
 * Usage: npm run bench:poller -- [--backends 8] [--interval-ms 200] [--seconds 30]
 * Needs `npm run build` (dist/health-poller.mjs, else it runs from source) and redis-server.
 */
import { parseCommandLine } from '@kvroute/platform/command-line';
import { spawn } from 'node:child_process';

const args = parseCommandLine({
  usage: 'npm run bench:poller -- [options]',
  summary:
    "The health poller's CPU and scrape lag over many backends.\nNeeds redis-server (and `npm run build`, else it runs from source).",
  options: {
    backends: { type: 'string', default: '8', value: 'number', description: 'simulated backends scraped' },
    'interval-ms': { type: 'string', default: '200', value: 'number', description: 'scrape interval' },
    seconds: { type: 'string', default: '30', value: 'number', description: 'measured window, after a 5 s warm-up' },
  },
});

// Loaded once the command line is accepted: --help, --version and a mistyped flag answer without them.
const { startRedis } = await import('@kvroute/testing');
const { processListeningOn } = await import('./listening-process');
const { freePort, startLocalSims, stopLocalProcess, stopLocalSims, waitReady } = await import('./local-sims');
const { processCpuSeconds } = await import('./process-cpu');
const { nodeEntry } = await import('./proxy-processes');
const backends = Number(args.backends);
const intervalMs = Number(args['interval-ms']);
const seconds = Number(args.seconds);
const WARMUP_MS = 5_000;

/** Scrapes the poller has counted, over every backend. */
async function scrapesCounted(metricsUrl: string): Promise<number> {
  const text = await (await fetch(metricsUrl)).text();
  let total = 0;
  for (const match of text.matchAll(/^kvroute_poller_scrapes_total\{[^}]*\} (\d+)/gm)) total += Number(match[1]);
  return total;
}

async function main(): Promise<void> {
  if (!(backends >= 1 && intervalMs >= 100 && seconds >= 1))
    throw new Error('--backends ≥ 1, --interval-ms ≥ 100, --seconds ≥ 1');
  const redis = await startRedis({ fresh: true, logger: (line) => console.log(`  ${line}`) });
  const redisPid =
    redis.source === 'local-redis-server' ? processListeningOn(redis.port, [process.pid])?.pid : undefined;
  const sims = await startLocalSims(backends, ['--profile', 'fast', '--model', 'bench-model']);
  const port = await freePort();
  const poller = spawn(
    process.execPath,
    [
      ...nodeEntry('dist/health-poller.mjs', 'apps/health-poller/src/main.ts'),
      ...[
        '--redis-url',
        redis.url,
        '--backends',
        sims.map((sim) => sim.url).join(','),
        '--interval-ms',
        String(intervalMs),
      ],
      ...['--scrape-timeout-ms', String(Math.max(50, intervalMs - 50)), '--port', String(port), '--log-level', 'warn'],
    ],
    { stdio: ['ignore', 'inherit', 'inherit'] },
  );
  const metricsUrl = `http://127.0.0.1:${port}/metrics`;
  try {
    await waitReady(`http://127.0.0.1:${port}/healthz`);
    console.log(
      `${backends} sims, one poller every ${intervalMs} ms; warming up ${WARMUP_MS / 1000} s, then measuring ${seconds} s…`,
    );
    await new Promise((resolve) => setTimeout(resolve, WARMUP_MS));
    const cpu = (): { poller: number; redis: number; sims: number } => ({
      poller: processCpuSeconds(poller.pid as number),
      redis: redisPid === undefined ? Number.NaN : processCpuSeconds(redisPid),
      sims: sims.reduce((sum, sim) => sum + processCpuSeconds(sim.process.pid as number), 0),
    });
    const before = { cpu: cpu(), scrapes: await scrapesCounted(metricsUrl) };
    for (let elapsed = 0; elapsed < seconds; elapsed += 10) {
      await new Promise((resolve) => setTimeout(resolve, Math.min(10, seconds - elapsed) * 1000));
      console.log(`  ${Math.min(seconds, elapsed + 10)} / ${seconds} s`);
    }
    const after = { cpu: cpu(), scrapes: await scrapesCounted(metricsUrl) };
    const scrapes = after.scrapes - before.scrapes;
    if (scrapes <= 0) throw new Error(`the poller counted no scrape in ${seconds} s (see its log above)`);
    const perScrape = (key: 'poller' | 'redis' | 'sims'): string => {
      const value = ((after.cpu[key] - before.cpu[key]) * 1e6) / scrapes;
      return Number.isFinite(value)
        ? `${Math.round(value).toLocaleString('en-US')} µs`
        : 'not measured (Redis is not a local redis-server)';
    };
    console.log(
      `\n| backends | interval ms | scrapes in ${seconds} s | poller CPU / scrape | Redis CPU / scrape | sims' CPU / scrape |`,
    );
    console.log('|---:|---:|---:|---:|---:|---:|');
    console.log(
      `| ${backends} | ${intervalMs} | ${scrapes} | ${perScrape('poller')} | ${perScrape('redis')} | ${perScrape('sims')} |`,
    );
    console.log(
      `\nOne poller core: ~${Math.round(1e6 / (((after.cpu.poller - before.cpu.poller) * 1e6) / scrapes))} scrapes/s.`,
    );
  } finally {
    await stopLocalProcess({ process: poller });
    await stopLocalSims(sims);
    await redis.stop();
  }
}

main().catch((error: unknown) => {
  console.error(error instanceof Error ? error.message : error);
  process.exit(1);
});
