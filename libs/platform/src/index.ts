/**
 * @kvroute/platform: how every kvroute process runs. Config from one zod schema, one root logger, and an orderly stop.
 * main.ts is the only intended caller: it loads config, creates the logger, pushes closers, and wires the signal.
 */
export {
  loadConfig,
  type LoadConfigOptions,
  type LoadConfigResult,
  type SharedConfigFile,
  type UnknownEnvVar,
} from './config/load-config';
export { readableIssueMap, unknownKeysMessage } from './config/readable-issue';
export { KVROUTE_FILE_KEYS } from './config/kvroute-file-keys';
export { findLenientObjects } from './config/lenient-objects';
export { renderKvrouteFileKeys } from './config/render-kvroute-file-keys';
export { renderConfigHelp, type RenderConfigHelpOptions } from './config/render-config-help';
export { renderConfigMarkdown } from './config/render-config-markdown';
export { ConfigError, describeSource, type ConfigProblem, type ConfigSource } from './config/config-error';
export type { ConfigSchema, EnvMap } from './config/config-options';
export { secretOption, urlWithSecretOffFlags } from './config/secret-option';
export { portOption } from './config/port-option';
export { readConfigFile } from './config/read-config-file';
export { toEnvName, toFlagName } from './config/option-names';
export {
  loadUpstreamKeys,
  UPSTREAM_KEY_SOURCE_FIELDS,
  upstreamKeyConfigFields,
  upstreamPlaceOf,
  UpstreamKeyError,
  UpstreamKeys,
  type UpstreamKeyConfig,
  type UpstreamKeyReaders,
  type UpstreamKeySource,
} from './config/upstream-keys';

export { buildInfo, versionLine, type BuildInfo } from './build-info';
export { registerBuildInfoGauge } from './metrics/build-info-gauge';

export { createLogger, type CreateLoggerOptions } from './logging/create-logger';
export { LOG_FORMATS, LOG_LEVELS, type LogFormat, type LogLevel } from './logging/log-level';
export { REDACT_PATHS, REDACTED } from './logging/redact-paths';

export {
  ShutdownStack,
  type CloseAllOptions,
  type Closer,
  type ShutdownLogger,
  type ShutdownResult,
} from './lifecycle/shutdown-stack';
export { settlesWithin } from './lifecycle/settles-within';
export { exitOnStartFailure } from './lifecycle/exit-on-start-failure';
export {
  onTerminationSignal,
  type TerminationHandler,
  type TerminationProcess,
  type TerminationSignalOptions,
} from './lifecycle/termination-signal';

export {
  closestName,
  editDistance,
  interpretCommandLine,
  parseCommandLine,
  usageAsLaunched,
  type CommandLineOutcome,
  type CommandLineSpec,
  type CommandOption,
  type CommandOptions,
} from './command-line/parse-command-line';
