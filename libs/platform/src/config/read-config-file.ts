/**
 * Reads the optional config file. `.json` files are parsed as JSON (precise errors); everything else as YAML, which
 * also accepts JSON. yaml 2 defaults to the YAML 1.2 core schema, so `on`/`yes` stay strings and duplicate keys are
 * errors. Read synchronously: this runs once, before the process does anything else.
 */
import { readFileSync } from 'node:fs';
import { extname } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { ConfigError } from './config-error';

/** The file's top-level mapping; an empty file is an empty mapping. */
export function readConfigFile(path: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (error) {
    throw new ConfigError([{ path, message: `cannot read config file: ${errorMessage(error)}` }], { cause: error });
  }

  let parsed: unknown;
  try {
    parsed = extname(path).toLowerCase() === '.json' ? JSON.parse(text) : parseYaml(text);
  } catch (error) {
    throw new ConfigError([{ path, message: `cannot parse config file: ${errorMessage(error)}` }], { cause: error });
  }

  if (parsed === null || parsed === undefined) return {};
  if (typeof parsed !== 'object' || Array.isArray(parsed)) {
    throw new ConfigError([{ path, message: 'config file must contain a mapping of option names to values' }]);
  }
  return parsed as Record<string, unknown>;
}

function errorMessage(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
