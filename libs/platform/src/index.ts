/**
 * @kvroute/platform: how every kvroute process runs. Config from one zod schema, one root logger, and an orderly stop.
 * main.ts is the only intended caller: it loads config, creates the logger, pushes closers, and wires the signal.
 */
// What an app's main.ts needs before its command line is accepted, also the light entry @kvroute/platform/config.
export * from './config/index';
export { readableIssueMap, unknownKeysMessage } from './config/readable-issue';
export { findLenientObjects } from './config/lenient-objects';
export { renderKvrouteFileKeys } from './config/render-kvroute-file-keys';
export { renderConfigHelp, type RenderConfigHelpOptions } from './config/render-config-help';
export { renderConfigMarkdown } from './config/render-config-markdown';
export { describeSource } from './config/config-error';
export { readConfigFile } from './config/read-config-file';
export { toEnvName, toFlagName } from './config/option-names';
export {
  loadUpstreamKeys,
  upstreamPlaceOf,
  UpstreamKeyError,
  UpstreamKeys,
  type UpstreamKeyReaders,
} from './config/upstream-keys';

export { buildInfo, versionLine, type BuildInfo } from './build-info';
export { registerBuildInfoGauge } from './metrics/build-info-gauge';

export { createLogger, type CreateLoggerOptions } from './logging/create-logger';
export { REDACT_PATHS, REDACTED } from './logging/redact-paths';

export {
  ShutdownStack,
  type CloseAllOptions,
  type Closer,
  type ShutdownLogger,
  type ShutdownResult,
} from './lifecycle/shutdown-stack';
export { settlesWithin } from './lifecycle/settles-within';
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
