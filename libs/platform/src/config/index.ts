/**
 * `@kvroute/platform/config`: what an app's main.ts needs before its command line is accepted (loadConfig, and the
 * exit of a start that failed on it) and what its config schema is built from, without the rest of the package
 * (pino, prom-client). `--help`, `--version` and a mistyped flag are answered from the schema alone, so an entry that
 * imports only this and its schema statically answers them without loading its server (apps/router/src/main.ts).
 */
export {
  loadConfig,
  type LoadConfigOptions,
  type LoadConfigResult,
  type SharedConfigFile,
  type UnknownEnvVar,
} from './load-config';
export { ConfigError, type ConfigProblem, type ConfigSource } from './config-error';
export type { ConfigSchema, EnvMap } from './config-options';
export { KVROUTE_FILE_KEYS } from './kvroute-file-keys';
export { portOption } from './port-option';
export { secretOption, urlWithSecretOffFlags } from './secret-option';
export {
  UPSTREAM_KEY_SOURCE_FIELDS,
  upstreamKeyConfigFields,
  type UpstreamKeyConfig,
  type UpstreamKeySource,
} from './upstream-keys';
export { LOG_FORMATS, LOG_LEVELS, type LogFormat, type LogLevel } from '../logging/log-level';
export { exitOnStartFailure } from '../lifecycle/exit-on-start-failure';
