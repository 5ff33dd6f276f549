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
   * only. Keys this app does not know are another app's and are ignored, except those that look like a
   * misspelling of one of this app's keys (still an error), and except other sections (mappings under a
   * name in `otherSections`), which are skipped whole.
   */
  sharedFile?: { readonly section: string; readonly otherSections: readonly string[] };
}

/** `help` when -h/--help or --version was given (print `text`, exit 0); otherwise the validated config. */
export type LoadConfigResult<T> =
  | { kind: 'help'; text: string }
  /** `ignoredFileKeys`: keys of a shared file left to other apps (log them: a typo far from any key lands here). */
  | { kind: 'config'; config: T; ignoredFileKeys: readonly string[] };

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
      usage: options.usage,
    });
    return { kind: 'help', text };
  }
  if (flags.problems.length > 0) throw new ConfigError(flags.problems);

  const merged: Record<string, unknown> = {};
  const sources = new Map<string, ConfigSource>();
  let ignoredFileKeys: readonly string[] = [];

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
    const unknownKeys = findUnknownFileKeys(options.schema, configOptions, fileValues, filePath);
    if (unknownKeys.length > 0) throw new ConfigError(unknownKeys);
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

  const result = options.schema.safeParse(merged);
  if (!result.success) {
    const byKey = new Map(configOptions.map((option) => [option.key, option]));
    throw new ConfigError(
      result.error.issues.map((issue) => toProblem(issue, sources, byKey)),
      { cause: result.error },
    );
  }
  return { kind: 'config', config: result.data, ignoredFileKeys };
}

/**
 * This app's view of a shared file: top-level keys overlaid by its own section; other apps' sections
 * and keys dropped, but a key that looks like a misspelling of one of this app's is kept (so the
 * unknown-key check reports it).
 */
function sectionValues(
  fileValues: Record<string, unknown>,
  shared: NonNullable<LoadConfigOptions<ConfigSchema>['sharedFile']>,
  configOptions: readonly ConfigOption[],
  filePath: string,
): Record<string, unknown> {
  const known = new Set(configOptions.map((option) => option.key));
  const squashedKnown = new Set([...known].map(squash));
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
    if (known.has(key) || squashedKnown.has(squash(key))) values[key] = value;
  }
  return { ...values, ...(own as Record<string, unknown> | undefined) };
}

function squash(key: string): string {
  return key.replace(/[-_]/g, '').toLowerCase();
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
): ConfigProblem[] {
  if (schema._zod.def.catchall !== undefined) return [];
  const known = new Set(configOptions.map((option) => option.key));
  return Object.keys(fileValues)
    .filter((key) => !known.has(key))
    .map((key) => {
      const squashed = squash(key);
      const suggestion = [...known].find((candidate) => candidate.toLowerCase() === squashed);
      const hint = suggestion === undefined ? '' : ` (did you mean "${suggestion}"?)`;
      return { path: key, message: `unknown option${hint}`, source: { kind: 'file', path: filePath } };
    });
}

function toProblem(
  issue: z.core.$ZodIssue,
  sources: ReadonlyMap<string, ConfigSource>,
  byKey: ReadonlyMap<string, ConfigOption>,
): ConfigProblem {
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
