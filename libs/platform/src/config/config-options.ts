/**
 * The option table derived from a config schema: one row per top-level key with its flag, env var and shape. The
 * loader, the flag parser and `--help` all read this table, so a key is spelled the same way everywhere.
 */
import type { z } from 'zod';
import { describeField, type FieldShape } from './field-shape';
import { toEnvName, toFlagName } from './option-names';
import { flagRefusedBecause, refusesSecretInUrlFlag } from './secret-option';

/** Any zod object schema; the loader only reads its `shape`. */
export type ConfigSchema = z.ZodObject<z.core.$ZodLooseShape, z.core.$ZodObjectConfig>;

/** Per-key env var names that replace the derived `<PREFIX>FOO_BAR` spelling. */
export type EnvMap<S extends ConfigSchema> = Partial<Record<Extract<keyof S['shape'], string>, string>>;

export interface ConfigOption {
  key: string;
  /** Flag name without dashes; null for nested objects, which only a config file can set, and for secrets. */
  flag: string | null;
  /** A secret (secret-option.ts): the flag it would have, refused, and why. */
  refusedFlag?: { readonly name: string; readonly reason: string };
  /** A URL whose flag is refused when the URL carries a password (secret-option.ts urlWithSecretOffFlags). */
  refusesSecretInUrl?: true;
  /** Env var name; null for nested objects. */
  env: string | null;
  shape: FieldShape;
}

export interface ConfigOptionNaming {
  envPrefix: string;
  envMap: Readonly<Record<string, string | undefined>>;
  /** Flag that names the config file (`config` → `--config`, env `<PREFIX>CONFIG`). */
  fileFlag: string;
}

/** Flags the loader itself owns; a schema key spelled the same way would be unreachable. */
const RESERVED_FLAGS = new Set(['help', 'h']);

export function listConfigOptions(schema: ConfigSchema, naming: ConfigOptionNaming): ConfigOption[] {
  const options: ConfigOption[] = [];
  const seenFlags = new Map<string, string>();
  for (const [key, field] of Object.entries(schema.shape)) {
    const shape = describeField(field);
    const settable = shape.kind !== 'object';
    const refusedBecause = flagRefusedBecause(field as z.core.$ZodType);
    const flag = settable && refusedBecause === undefined ? toFlagName(key) : null;
    if (flag !== null) {
      // Programmer errors in the schema, not user input: fail loudly at the first load rather than shadow a key.
      if (RESERVED_FLAGS.has(flag) || flag === naming.fileFlag) {
        throw new Error(`config key "${key}" maps to the reserved flag --${flag}`);
      }
      const clash = seenFlags.get(flag);
      if (clash !== undefined) throw new Error(`config keys "${clash}" and "${key}" both map to --${flag}`);
      seenFlags.set(flag, key);
    }
    const env = settable ? (naming.envMap[key] ?? toEnvName(key, naming.envPrefix)) : null;
    const option: ConfigOption = { key, flag, env, shape };
    if (settable && refusedBecause !== undefined)
      option.refusedFlag = { name: toFlagName(key), reason: refusedBecause };
    if (flag !== null && refusesSecretInUrlFlag(field as z.core.$ZodType)) option.refusesSecretInUrl = true;
    options.push(option);
  }
  return options;
}

/** Env var that names the config file, derived like any other key. */
export function fileEnvName(naming: ConfigOptionNaming): string {
  return toEnvName(naming.fileFlag, naming.envPrefix);
}
