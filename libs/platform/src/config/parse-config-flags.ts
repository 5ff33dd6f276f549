/**
 * Command-line flags → raw strings per schema key. Hand-parsed rather than with `util.parseArgs` because the loader
 * needs three things parseArgs does not give: negative numbers as separate values (`--offset -5`), explicit boolean
 * values (`--verbose=false`), and every problem collected with our wording instead of the first one thrown.
 *
 * Accepted forms: `--key value`, `--key=value`, `--flag`, `--no-flag`, `--flag=false`, `-h`/`--help`. A bare `--` is
 * skipped (npm forwards it). Array flags may repeat; their values join as one comma-separated list.
 */
import type { ConfigProblem } from './config-error';
import type { ConfigOption } from './config-options';
import { SECRET_IN_URL_REASON, urlCarriesSecret } from './secret-option';

export interface ParsedFlag {
  /** Flag name as the user typed it, without dashes (`no-verbose` for a negation). */
  name: string;
  raw: string;
}

export interface ParsedFlags {
  help: boolean;
  /** `--version` was given: print the build (build-info.ts), nothing else. */
  version: boolean;
  /** Value of the file flag (`--config`), if given. */
  filePath?: string;
  /** Keyed by schema key. */
  values: Map<string, ParsedFlag>;
  problems: ConfigProblem[];
}

export function parseConfigFlags(
  argv: readonly string[],
  options: readonly ConfigOption[],
  fileFlag: string,
): ParsedFlags {
  const byFlag = new Map<string, ConfigOption>();
  for (const option of options) if (option.flag !== null) byFlag.set(option.flag, option);
  const refused = new Map<string, ConfigOption>();
  for (const option of options) if (option.refusedFlag !== undefined) refused.set(option.refusedFlag.name, option);

  const result: ParsedFlags = { help: false, version: false, values: new Map(), problems: [] };
  let index = 0;
  while (index < argv.length) {
    const token = argv[index] ?? '';
    index += 1;
    if (token === '--') continue;
    if (token === '-h' || token === '--help') {
      result.help = true;
      continue;
    }
    if (token === '--version') {
      result.version = true;
      continue;
    }
    if (!token.startsWith('--')) {
      result.problems.push({ path: token, message: unexpectedArgumentMessage(token, argv[index - 2], byFlag) });
      continue;
    }

    const body = token.slice(2);
    const equals = body.indexOf('=');
    const name = equals === -1 ? body : body.slice(0, equals);
    const inlineValue = equals === -1 ? undefined : body.slice(equals + 1);

    // Takes the value after `=`, or else the next token unless it is another `--flag` (a missing value).
    const takeValue = (): string | undefined => {
      if (inlineValue !== undefined) return inlineValue;
      const next = argv[index];
      if (next === undefined || next.startsWith('--')) {
        result.problems.push({ path: `--${name}`, message: 'expects a value' });
        return undefined;
      }
      index += 1;
      return next;
    };

    if (name === fileFlag) {
      const value = takeValue();
      if (value !== undefined) result.filePath = value;
      continue;
    }

    const option = byFlag.get(name);
    if (option !== undefined) {
      if (option.shape.kind === 'boolean') {
        result.values.set(option.key, { name, raw: inlineValue ?? 'true' });
        continue;
      }
      const value = takeValue();
      if (value === undefined) continue;
      if (option.refusesSecretInUrl === true && urlCarriesSecret(value)) {
        result.problems.push({ path: `--${name}`, message: secretInUrlMessage(option) });
        continue;
      }
      const previous = result.values.get(option.key);
      const raw = option.shape.kind === 'array' && previous !== undefined ? `${previous.raw},${value}` : value;
      result.values.set(option.key, { name, raw });
      continue;
    }

    const secret = refused.get(name);
    if (secret?.refusedFlag !== undefined) {
      // Refused without echoing the value; skip a separate value so it is not reported as a stray argument.
      if (inlineValue === undefined && argv[index] !== undefined && !(argv[index] as string).startsWith('--'))
        index += 1;
      const how =
        secret.env === null
          ? `"${secret.key}" in the config file`
          : `${secret.env} or "${secret.key}" in the config file`;
      result.problems.push({
        path: `--${name}`,
        message: `is refused: ${secret.refusedFlag.reason}; set ${how} instead`,
      });
      continue;
    }

    // `--no-foo` negates boolean `foo`. Checked after the exact match so a key literally named `noCache` still works.
    const negated = name.startsWith('no-') ? byFlag.get(name.slice(3)) : undefined;
    if (negated !== undefined && negated.shape.kind === 'boolean' && inlineValue === undefined) {
      result.values.set(negated.key, { name, raw: 'false' });
      continue;
    }

    // The value of an unknown flag is skipped, not reported as a stray argument: a misspelt secret flag
    // (`--adminToken s3cret`) must not have its value echoed in the error.
    if (inlineValue === undefined && argv[index] !== undefined && !(argv[index] as string).startsWith('-')) index += 1;
    result.problems.push({ path: `--${name}`, message: unknownFlagMessage(name, byFlag, fileFlag) });
  }
  return result;
}

/** Why a URL flag with a password is refused, and where to put it instead; never the value. */
function secretInUrlMessage(option: ConfigOption): string {
  const where =
    option.env === null ? `"${option.key}" in the config file` : `${option.env} or "${option.key}" in the config file`;
  return `is refused with a password in the URL: ${SECRET_IN_URL_REASON}; set ${where} instead`;
}

function unknownFlagMessage(name: string, byFlag: ReadonlyMap<string, ConfigOption>, fileFlag: string): string {
  // Catch the common slip of typing the schema key (`--timeScale`) instead of the flag (`--time-scale`).
  const squashed = name.replace(/-/g, '').toLowerCase();
  const known = [...byFlag.keys(), fileFlag];
  const suggestion = known.find((flag) => flag.replace(/-/g, '') === squashed);
  const hint = suggestion === undefined ? ' (see --help)' : ` (did you mean --${suggestion}?)`;
  return `unknown flag${hint}`;
}

function unexpectedArgumentMessage(
  token: string,
  previous: string | undefined,
  byFlag: ReadonlyMap<string, ConfigOption>,
): string {
  const previousFlag = previous?.startsWith('--') === true ? byFlag.get(previous.slice(2)) : undefined;
  if (previousFlag?.shape.kind === 'boolean') {
    return `unexpected argument; boolean flags take no separate value, use --${previousFlag.flag}=${token} or --no-${previousFlag.flag}`;
  }
  return token.startsWith('-') ? 'unknown flag (see --help)' : 'unexpected argument; options are given as --name value';
}
