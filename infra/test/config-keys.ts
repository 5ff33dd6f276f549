/**
 * The environment variables each kvroute app reads, derived from its zod config schema the same way
 * the config loader derives them (`<PREFIX><KEY_IN_SNAKE_CASE>`, plus `<PREFIX>CONFIG` for the file),
 * so a test can check that every variable a deployment file sets is one the app knows.
 */
import { PollerConfig, POLLER_ENV_PREFIX } from '@kvroute/health-poller/config';
import { toEnvName } from '@kvroute/platform';
import { RouterConfig, ROUTER_ENV_PREFIX } from '@kvroute/router/config';
import { SimConfig, SIM_ENV_PREFIX } from '@kvroute/vllm-sim/config';

export type KvrouteApp = 'router' | 'poller' | 'sim';

const SCHEMAS = {
  router: { shape: RouterConfig.shape, prefix: ROUTER_ENV_PREFIX },
  poller: { shape: PollerConfig.shape, prefix: POLLER_ENV_PREFIX },
  sim: { shape: SimConfig.shape, prefix: SIM_ENV_PREFIX },
} as const;

/** Every env var `app` reads: one per config key, and the config file's. */
export function knownEnvVars(app: KvrouteApp): Set<string> {
  const { shape, prefix } = SCHEMAS[app];
  return new Set([...Object.keys(shape).map((key) => toEnvName(key, prefix)), toEnvName('config', prefix)]);
}

/** Env var names that look like kvroute settings (`KVROUTE_…`) but that `app` does not read. */
export function unknownEnvVars(app: KvrouteApp, names: Iterable<string>): string[] {
  const known = knownEnvVars(app);
  return [...names].filter((name) => name.startsWith('KVROUTE_') && !known.has(name));
}

/** Config keys (camelCase) that `app` does not have, e.g. from a YAML config file. */
export function unknownConfigKeys(app: KvrouteApp, keys: Iterable<string>): string[] {
  const shape = SCHEMAS[app].shape as Record<string, unknown>;
  return [...keys].filter((key) => !(key in shape));
}
