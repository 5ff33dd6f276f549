import { exitOnStartFailure, loadConfig } from '@kvroute/platform/config';
import { SIM_ENV_PREFIX, SimConfig } from './config';
import { PROFILES } from './engine/profiles';

/** Composition root: config → logger → sim (engine, loop, app) → listen → shutdown on SIGTERM. */
async function main(): Promise<void> {
  const loaded = loadConfig({
    schema: SimConfig,
    argv: process.argv.slice(2),
    env: process.env,
    envPrefix: SIM_ENV_PREFIX,
    usage:
      'npm run sim -- [options]\n\nA simulated vLLM worker: prefix cache, continuous batching, real vllm:* metrics.\nProfiles: ' +
      [...PROFILES.values()].map((profile) => `${profile.name} (${profile.description})`).join('; '),
  });
  if (loaded.kind === 'help') {
    process.stdout.write(`${loaded.text}\n`);
    return;
  }
  // The server (fastify, the engine, the logger) loads only once the command line is accepted: --help, --version
  // and a refused flag are answered from the config schema alone, at once.
  const { createLogger, onTerminationSignal, ShutdownStack } = await import('@kvroute/platform');
  const { createSimServer } = await import('./create-sim');
  // vLLM reads NONE_HASH's seed from PYTHONHASHSEED; the sim's own option wins when both are set.
  const pythonHashSeed = loaded.config.pythonHashSeed ?? process.env.PYTHONHASHSEED;
  const seeded = pythonHashSeed === undefined ? loaded.config : { ...loaded.config, pythonHashSeed };
  // vLLM attaches its runtime LoRA routes when VLLM_ALLOW_RUNTIME_LORA_UPDATING is "1" or "true" (any case).
  const runtimeLora = ['1', 'true'].includes((process.env.VLLM_ALLOW_RUNTIME_LORA_UPDATING ?? '').trim().toLowerCase());
  const config = runtimeLora ? { ...seeded, allowRuntimeLoraUpdating: true } : seeded;
  const logger = createLogger({ service: 'vllm-sim', level: config.logLevel, pretty: config.logFormat === 'pretty' });
  for (const variable of loaded.unknownEnv)
    logger.warn(
      { variable: variable.name, didYouMean: variable.didYouMean },
      'environment variable matches no option: ignored',
    );
  const shutdown = new ShutdownStack();
  const sim = await createSimServer(config, { logger: logger.child({ component: 'http' }) });
  const url = await sim.listen();
  shutdown.push('http server and engine', () => sim.close());
  logger.info(
    {
      url,
      profile: config.profile,
      model: sim.servedModel,
      timeScale: config.timeScale,
      dialect: config.metricsDialect,
      engineVersion: sim.engine.version,
      numGpuBlocks: sim.engine.pool.numGpuBlocks,
      dataParallelSize: sim.ranks.size,
      kvEvents: sim.kvEvents?.map((events) => events.publisher.endpoint) ?? 'off',
    },
    'vllm-sim listening',
  );
  onTerminationSignal(async () => {
    logger.info('shutting down');
    await shutdown.closeAll({ deadlineMs: 5_000, logger });
    process.exit(0);
  });
}

main().catch((error: unknown) => exitOnStartFailure('vllm-sim', error));
