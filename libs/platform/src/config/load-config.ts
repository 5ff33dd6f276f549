/**
 * Loads a process's configuration from one zod object schema. Precedence, lowest first:
 *
 *   schema defaults  <  config file (--config FILE or <PREFIX>CONFIG)  <  env vars  <  command-line flags
 *
 * Merging is per top-level key: a higher source replaces the whole value of a key, never part of it. Nested objects
 * can only come from the file, so there is nothing to deep-merge. Env and flag strings are coerced to the field's type
 * (see coerce-value.ts); empty env strings count as unset, because `FOO= cmd` and shells' `${FOO:-}` mean "no value".
 *
 * The caller passes argv and env in (main.ts owns `process`), so this module reads no globals and tests need no stubs.
 */
import type { z } from 'zod';
import { ConfigError, type ConfigProblem, type ConfigSource } from './config-error';
import {
  fileEnvName,
  listConfigOptions,
  type ConfigOption,
  type ConfigOptionNaming,
  type ConfigSchema,
  type EnvMap,
} from './config-options';
import { coerceValue } from './coerce-value';
import { parseConfigFlags } from './parse-config-flags';
import { readConfigFile } from './read-config-file';
import { buildInfo, versionLine } from '../build-info';
import { renderConfigHelp } from './render-config-help';
import { readableIssueMap, unknownKeysMessage } from './readable-issue';
import { flagRefusedBecause } from './secret-option';
import { closestName, usageAsLaunched } from '../command-line/parse-command-line';

export interface LoadConfigOptions<S extends ConfigSchema> {
  schema: S;
  /** Arguments after the script name: `process.argv.slice(2)`. */
  argv: readonly string[];
  env: Readonly<Record<string, string | undefined>>;
  /** Prepended verbatim to derived env names, so include the underscore: `KVROUTE_SIM_`. Default: none. */
  envPrefix?: string;
  /** Explicit env var names for keys whose derived name does not fit (e.g. a shared `REDIS_URL`). */
  envMap?: EnvMap<S>;
  /** Flag naming the config file, without dashes. Default `config` (env `<PREFIX>CONFIG`). */
  fileFlag?: string;
  /** First line of `--help`, e.g. `Usage: vllm-sim [options]`. */
  usage?: string;
  /**
   * The config file is shared by several apps (kvroute.yaml: routers and health pollers read one file).
   * Its top-level keys are common; a mapping under `section` (e.g. `poller:`) overrides them for this app
   * only. A top-level key only another app knows (`otherAppKeys`) is left to it; a key no app knows is an
   * error, as in an app's own file. Other sections (mappings under a name in `otherSections`) are skipped
   * whole: their app checks them.
   */
  sharedFile?: SharedConfigFile;
}

export interface SharedConfigFile {
  readonly section: string;
  readonly otherSections: readonly string[];
  /** Top-level keys of the other apps that read the file (KVROUTE_FILE_KEYS, generated from their schemas). */
  readonly otherAppKeys: readonly string[];
}

/**
 * Variables under an app's prefix that belong to something else: another app's prefix (the poller's
 * `KVROUTE_POLLER_` starts with the router's `KVROUTE_`) or the process (build-info.ts, the package's launcher).
 */
const ENV_OWNED_ELSEWHERE = {
  prefixes: ['KVROUTE_POLLER_', 'KVROUTE_SIM_', 'KVROUTE_ORACLE_'],
  names: ['KVROUTE_COMMIT', 'KVROUTE_BUNDLE_DIR', 'KVROUTE_LAUNCHED_AS'],
} as const;

/** An environment variable under the app's prefix that no option reads (a typo, or an option since renamed). */
export interface UnknownEnvVar {
  readonly name: string;
  /** The option's variable it most resembles, if one is close. */
  readonly didYouMean?: string;
}

/** `help` when -h/--help or --version was given (print `text`, exit 0); otherwise the validated config. */
export type LoadConfigResult<T> =
  | { kind: 'help'; text: string }
  /** `ignoredFileKeys`: top-level keys of a shared file that only another app knows, left to it. */
  | {
      kind: 'config';
      config: T;
      ignoredFileKeys: readonly string[];
      /**
       * Variables under the app's prefix that no option reads. Warned about, not refused: an environment is shared
       * (a container's, a shell's) and may hold another version's variables, where a config file is this app's own.
       */
      unknownEnv: readonly UnknownEnvVar[];
    };

/** @throws ConfigError for unknown flags, an unreadable file or values the schema rejects. */
export function loadConfig<S extends ConfigSchema>(options: LoadConfigOptions<S>): LoadConfigResult<z.output<S>> {
  const naming: ConfigOptionNaming = {
    envPrefix: options.envPrefix ?? '',
    envMap: options.envMap ?? {},
    fileFlag: options.fileFlag ?? 'config',
  };
  const configOptions = listConfigOptions(options.schema, naming);

  const flags = parseConfigFlags(options.argv, configOptions, naming.fileFlag);
  if (flags.version) return { kind: 'help', text: versionLine(buildInfo()) };
  if (flags.help) {
    const text = renderConfigHelp(options.schema, {
      envPrefix: naming.envPrefix,
      envMap: options.envMap,
      fileFlag: naming.fileFlag,
      usage: options.usage === undefined ? undefined : usageAsLaunched(options.usage, options.env),
    });
    return { kind: 'help', text };
  }
  if (flags.problems.length > 0) throw new ConfigError(flags.problems);

  const merged: Record<string, unknown> = {};
  const sources = new Map<string, ConfigSource>();
  let ignoredFileKeys: readonly string[] = [];
  // Reported with the schema's problems, so that one start lists every mistake in the file.
  let unknownFileKeys: ConfigProblem[] = [];

  const filePath = flags.filePath ?? nonEmpty(options.env[fileEnvName(naming)]);
  if (filePath !== undefined) {
    const rawValues = readConfigFile(filePath);
    const fileValues =
      options.sharedFile === undefined
        ? rawValues
        : sectionValues(rawValues, options.sharedFile, configOptions, filePath);
    const sections =
      options.sharedFile === undefined ? [] : [options.sharedFile.section, ...options.sharedFile.otherSections];
    ignoredFileKeys = Object.keys(rawValues).filter((key) => !(key in fileValues) && !sections.includes(key));
    unknownFileKeys = findUnknownFileKeys(
      options.schema,
      configOptions,
      fileValues,
      filePath,
      options.sharedFile,
      rawValues,
    );
    for (const [key, value] of Object.entries(fileValues)) {
      merged[key] = value;
      sources.set(key, { kind: 'file', path: filePath });
    }
  }

  for (const option of configOptions) {
    if (option.env === null) continue;
    const raw = nonEmpty(options.env[option.env]);
    if (raw === undefined) continue;
    merged[option.key] = coerceValue(raw, option.shape);
    sources.set(option.key, { kind: 'env', name: option.env, raw });
  }

  for (const option of configOptions) {
    const flag = flags.values.get(option.key);
    if (flag === undefined) continue;
    merged[option.key] = coerceValue(flag.raw, option.shape);
    sources.set(option.key, { kind: 'flag', name: flag.name, raw: flag.raw });
  }

  const secretKeys = new Set(
    Object.entries(options.schema.shape)
      .filter(([, field]) => flagRefusedBecause(field as z.core.$ZodType) !== undefined)
      .map(([key]) => key),
  );
  const result = options.schema.safeParse(merged, {
    error: readableIssueMap({ rawValueAt: (path) => valueAt(merged, path), secretKeys }),
  });
  if (!result.success || unknownFileKeys.length > 0) {
    const byKey = new Map(configOptions.map((option) => [option.key, option]));
    const schemaProblems = result.success ? [] : result.error.issues.map((issue) => toProblem(issue, sources, byKey));
    throw new ConfigError([...unknownFileKeys, ...schemaProblems], { cause: result.error });
  }
  return {
    kind: 'config',
    config: result.data,
    ignoredFileKeys,
    unknownEnv: findUnknownEnv(options.env, configOptions, naming),
  };
}

/** The value at `path` in the merged input, before the schema coerced it; undefined where the path leads nowhere. */
function valueAt(root: unknown, path: readonly PropertyKey[]): unknown {
  let current = root;
  for (const step of path) {
    if (current === null || typeof current !== 'object') return undefined;
    current = (current as Record<PropertyKey, unknown>)[step];
  }
  return current;
}

function findUnknownEnv(
  env: Readonly<Record<string, string | undefined>>,
  configOptions: readonly ConfigOption[],
  naming: ConfigOptionNaming,
): UnknownEnvVar[] {
  if (naming.envPrefix === '') return [];
  const known = [fileEnvName(naming), ...configOptions.flatMap((option) => (option.env === null ? [] : [option.env]))];
  const ownedElsewhere = (name: string) =>
    (ENV_OWNED_ELSEWHERE.names as readonly string[]).includes(name) ||
    ENV_OWNED_ELSEWHERE.prefixes.some(
      (prefix) => prefix !== naming.envPrefix && name.startsWith(prefix) && prefix.length > naming.envPrefix.length,
    );
  return Object.keys(env)
    .filter((name) => name.startsWith(naming.envPrefix) && !known.includes(name) && !ownedElsewhere(name))
    .sort()
    .map((name) => {
      const didYouMean = closestName(
        name.slice(naming.envPrefix.length),
        known.map((candidate) => candidate.slice(naming.envPrefix.length)),
      );
      return didYouMean === undefined ? { name } : { name, didYouMean: naming.envPrefix + didYouMean };
    });
}

/**
 * This app's view of a shared file: top-level keys overlaid by its own section; other apps' sections
 * and keys dropped, but a key that looks like a misspelling of one of this app's is kept (so the
 * unknown-key check reports it).
 */
function sectionValues(
  fileValues: Record<string, unknown>,
  shared: SharedConfigFile,
  configOptions: readonly ConfigOption[],
  filePath: string,
): Record<string, unknown> {
  const known = new Set(configOptions.map((option) => option.key));
  const othersOnly = new Set(shared.otherAppKeys.filter((key) => !known.has(key)));
  const own = fileValues[shared.section];
  if (own !== undefined && (typeof own !== 'object' || own === null || Array.isArray(own))) {
    throw new ConfigError([
      {
        path: shared.section,
        message: "must be a mapping of this app's options",
        source: { kind: 'file', path: filePath },
      },
    ]);
  }
  const values: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(fileValues)) {
    if (key === shared.section || shared.otherSections.includes(key)) continue;
    // Kept: this app's keys, and keys nobody knows, so that the unknown-key check refuses them.
    if (!othersOnly.has(key)) values[key] = value;
  }
  return { ...values, ...(own as Record<string, unknown> | undefined) };
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value === '' ? undefined : value;
}

/**
 * Top-level file keys the schema does not know. A typo in a config file would otherwise be dropped silently by
 * zod's default strip mode; a schema built with `z.looseObject` (a catchall) opts out of this check.
 */
function findUnknownFileKeys(
  schema: ConfigSchema,
  configOptions: readonly ConfigOption[],
  fileValues: Record<string, unknown>,
  filePath: string,
  sharedFile: SharedConfigFile | undefined,
  rawValues: Record<string, unknown>,
): ConfigProblem[] {
  if (schema._zod.def.catchall !== undefined) return [];
  const known = configOptions.map((option) => option.key);
  const ownSection = sharedFile === undefined ? undefined : rawValues[sharedFile.section];
  const inOwnSection = (key: string) =>
    ownSection !== null && typeof ownSection === 'object' && Object.hasOwn(ownSection, key);
  return Object.keys(fileValues)
    .filter((key) => !known.includes(key))
    .map((key) => ({
      path: sharedFile !== undefined && inOwnSection(key) ? `${sharedFile.section}.${key}` : key,
      message: unknownKeysMessage([key], [...known, ...(sharedFile?.otherAppKeys ?? [])]),
      source: { kind: 'file', path: filePath },
    }));
}

function toProblem(
  issue: z.core.$ZodIssue,
  sources: ReadonlyMap<string, ConfigSource>,
  byKey: ReadonlyMap<string, ConfigOption>,
): ConfigProblem {
  // An unknown nested key is named in the message; its mapping is the place.
  const path = issue.path.length === 0 ? '(config)' : issue.path.map(String).join('.');
  const key = issue.path[0] === undefined ? undefined : String(issue.path[0]);
  const source = (key === undefined ? undefined : sources.get(key)) ?? { kind: 'default' as const };
  const option = key === undefined ? undefined : byKey.get(key);
  // A required field nobody set: say how to set it rather than only that it is missing.
  const problem: ConfigProblem = { path, message: issue.message, source };
  if (source.kind === 'default' && option !== undefined) problem.hint = howToSet(option);
  return problem;
}

function howToSet(option: ConfigOption): string {
  if (option.flag === null && option.env !== null) return `set ${option.env} or "${option.key}" in the config file`;
  if (option.flag === null || option.env === null) return 'set it in the config file';
  return `set --${option.flag}, ${option.env} or "${option.key}" in the config file`;
}
