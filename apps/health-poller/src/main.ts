import { exitOnStartFailure, loadConfig } from '@kvroute/platform/config';
import { POLLER_ENV_PREFIX, POLLER_CONFIG_FILE, PollerConfig } from './config';

/** Composition root: config → logger → poller (Redis, queue, worker, schedulers, HTTP) → start → graceful stop on SIGTERM. */
async function main(): Promise<void> {
  const loaded = loadConfig({
    schema: PollerConfig,
    argv: process.argv.slice(2),
    env: process.env,
    envPrefix: POLLER_ENV_PREFIX,
    sharedFile: POLLER_CONFIG_FILE,
    usage:
      'npm run poller -- --redis-url redis://HOST:6379 [--backends URL[,URL…]] [options]\n\nkvroute ' +
      'health poller: scrapes every backend once per interval and publishes its state through Redis.',
  });
  if (loaded.kind === 'help') {
    process.stdout.write(`${loaded.text}\n`);
    return;
  }
  // The poller itself (Redis, the queue, fastify, the logger) loads only once the command line is accepted:
  // --help, --version and a refused flag are answered from the config schema alone, at once.
  const { createLogger, onTerminationSignal } = await import('@kvroute/platform');
  const { createHealthPoller } = await import('./create-poller');
  const config = loaded.config;
  const logger = createLogger({
    service: 'kvroute-poller',
    level: config.logLevel,
    pretty: config.logFormat === 'pretty',
  });
  if (loaded.ignoredFileKeys.length > 0)
    logger.info({ keys: loaded.ignoredFileKeys }, 'config file keys left to other kvroute apps');
  for (const variable of loaded.unknownEnv)
    logger.warn(
      { variable: variable.name, didYouMean: variable.didYouMean },
      'environment variable matches no option: ignored',
    );
  const poller = await createHealthPoller(config, { logger, env: process.env });
  let stopping = false;
  onTerminationSignal(
    async (signal) => {
      stopping = true;
      logger.info(
        { signal, graceMs: config.shutdownGraceMs },
        'shutting down: finishing the running scrapes, then closing the worker, queue and Redis',
      );
      const result = await poller.close();
      logger.info(
        {
          closed: result.closed,
          failed: result.failed.map((failure) => failure.name),
          timedOut: result.timedOut,
          elapsedMs: result.elapsedMs,
        },
        'poller closed',
      );
      process.exit(result.ok ? 0 : 1);
    },
    { onError: (error) => logger.fatal({ err: error }, 'shutdown failed') },
  );
  try {
    await poller.start();
  } catch (error) {
    // A signal during start (Redis still unreachable, say) closes what start was using: the shutdown
    // under way ends the process, not this error.
    if (stopping) return;
    throw error;
  }
}

main().catch((error: unknown) => exitOnStartFailure('kvroute poller', error));
