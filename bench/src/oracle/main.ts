/**
 * The oracle router as its own process, as the bench's local cluster starts it for `oracle` and `oracle-cost` runs.
 *
 * Usage: tsx bench/src/oracle/main.ts --backends URL,URL [--rule oracle|oracle-cost] [--host 127.0.0.1] [--port 0] [--match-timeout-ms 500]
 *        [cacheaware's keys for oracle-cost, e.g. --prefill-ms-per-token 0.07 --spread-abs 8]
 * Prints one line, `oracle router (RULE) listening on URL`, once it accepts connections; exits on SIGTERM/SIGINT.
 */
import { exitOnStartFailure, loadConfig } from '@kvroute/platform/config';
import { ORACLE_ENV_PREFIX, OracleConfig } from './oracle-config';

async function main(): Promise<void> {
  const loaded = loadConfig({
    schema: OracleConfig,
    argv: process.argv.slice(2),
    env: process.env,
    envPrefix: ORACLE_ENV_PREFIX,
    usage:
      'tsx bench/src/oracle/main.ts --backends URL,URL [options]\n\nBenchmarks only: routes each ' +
      'completion by what the vllm-sim backends say they hold (their POST /sim/match): to the largest ' +
      "true hit (--rule oracle), or by cacheaware's cost rule fed those true matches (--rule oracle-cost).",
  });
  if (loaded.kind === 'help') {
    process.stdout.write(`${loaded.text}\n`);
    return;
  }
  // Loaded once the command line is accepted, as the apps' main.ts do: --help answers from the schema alone.
  const { onTerminationSignal } = await import('@kvroute/platform');
  const { startOracleRouter } = await import('./oracle-router');
  const router = await startOracleRouter(loaded.config);
  process.stdout.write(`oracle router (${loaded.config.rule}) listening on ${router.url}\n`);
  onTerminationSignal(async () => {
    await router.close();
    process.exit(0);
  });
}

main().catch((error: unknown) => exitOnStartFailure('oracle router', error));
