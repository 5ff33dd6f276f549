/**
 * The oracle router as its own process, as the bench's local cluster starts it for `oracle` runs.
 *
 * Usage: tsx bench/src/oracle/main.ts --backends URL,URL [--host 127.0.0.1] [--port 0] [--match-timeout-ms 500]
 * Prints one line, `oracle router listening on URL`, once it accepts connections; exits on SIGTERM/SIGINT.
 */
import { loadConfig, onTerminationSignal } from '@kvroute/platform';
import { ORACLE_ENV_PREFIX, OracleConfig } from './oracle-config';
import { startOracleRouter } from './oracle-router';

async function main(): Promise<void> {
  const loaded = loadConfig({
    schema: OracleConfig,
    argv: process.argv.slice(2),
    env: process.env,
    envPrefix: ORACLE_ENV_PREFIX,
    usage: 'tsx bench/src/oracle/main.ts --backends URL,URL [options]\n\nBenchmarks only: routes each completion to the vllm-sim backend with the largest true cache hit (its POST /sim/match).',
  });
  if (loaded.kind === 'help') {
    process.stdout.write(`${loaded.text}\n`);
    return;
  }
  const router = await startOracleRouter(loaded.config);
  process.stdout.write(`oracle router listening on ${router.url}\n`);
  onTerminationSignal(async () => {
    await router.close();
    process.exit(0);
  });
}

main().catch((error: unknown) => {
  process.stderr.write(`oracle router: ${error instanceof Error ? error.message : String(error)}\n`);
  process.exit(1);
});
