import { exitOnStartFailure, loadConfig } from '@kvroute/platform/config';
import { ROUTER_ENV_PREFIX, ROUTER_CONFIG_FILE, RouterConfig } from './config';

/**
 * Composition root: config → logger → router (backends, state, policies, app) → listen → graceful
 * shutdown on SIGTERM (drain, finish in-flight requests, release leases, close Redis: RouterServer.close).
 */
async function main(): Promise<void> {
  const loaded = loadConfig({
    schema: RouterConfig,
    argv: process.argv.slice(2),
    env: process.env,
    envPrefix: ROUTER_ENV_PREFIX,
    sharedFile: ROUTER_CONFIG_FILE,
    usage:
      'npm run router -- --backends URL[,URL…] | --discovery dns://NAME:PORT|dns+srv://…|k8s://SERVICE ' +
      '[options]\n\nkvroute: a KV-cache-aware OpenAI-compatible router.',
  });
  if (loaded.kind === 'help') {
    process.stdout.write(`${loaded.text}\n`);
    return;
  }
  // The router itself (fastify, undici, ioredis, the tokenizers, the logger) loads only once the command line is
  // accepted: --help, --version and a refused flag are answered from the config schema alone, at once.
  const { createLogger, onTerminationSignal, ShutdownStack } = await import('@kvroute/platform');
  const { CLOSE_TAIL_MS, createRouterServer } = await import('./create-router');
  const config = loaded.config;
  const logger = createLogger({
    service: 'kvroute-router',
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
  const shutdown = new ShutdownStack();
  // The root logger: each part adds its own `component` (a child of a child would write the key twice).
  const router = await createRouterServer(config, { logger, env: process.env });
  const url = await router.listen();
  shutdown.push('router', async () => {
    const report = await router.close({ drainDelayMs: config.shutdownDrainDelayMs, graceMs: config.shutdownGraceMs });
    logger.info(report, 'router closed');
  });
  logger.info(
    {
      url,
      opsUrl: router.opsUrl,
      adminUrl: router.adminUrl,
      policy: config.policy,
      backends: router.registry.backends.map((backend) => backend.id),
      models: router.registry.models(),
    },
    'kvroute router listening',
  );
  onTerminationSignal(
    async (signal) => {
      logger.info(
        { signal, drainDelayMs: config.shutdownDrainDelayMs, graceMs: config.shutdownGraceMs },
        'shutting down: readiness off, draining, then finishing in-flight requests',
      );
      // The router bounds its own steps (drain, grace, then abort and release); the stack's deadline is
      // the backstop beyond them.
      const result = await shutdown.closeAll({
        deadlineMs: config.shutdownDrainDelayMs + config.shutdownGraceMs + CLOSE_TAIL_MS,
        logger,
      });
      process.exit(result.ok ? 0 : 1);
    },
    { onError: (error) => logger.fatal({ err: error }, 'shutdown failed') },
  );
}

main().catch((error: unknown) => exitOnStartFailure('kvroute router', error));
