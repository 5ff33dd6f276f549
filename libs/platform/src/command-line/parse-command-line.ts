/**
 * The command line of the commands that have no config schema (benchmarks, the demo, `api-key`, the repository's
 * tools): node:util parseArgs, plus what every kvroute command owes its user and parseArgs does not give:
 *
 * - `-h`/`--help` prints the usage (generated from the options' descriptions unless the command writes its own) and
 *   exits 0; `--version` prints the build (build-info.ts) and exits 0. Both win over any other argument, so a
 *   mistyped flag next to `--help` still gets the help.
 * - A user's mistake (an unknown flag, a missing value, a value that is not a number where one is expected) is one
 *   line on stderr, naming the flag, and exit code 2 (the shell's "usage error"), never a stack trace.
 *
 * Values stay the strings parseArgs returns: a command converts them itself, after they were checked here.
 */
import { parseArgs, type ParseArgsConfig } from 'node:util';
import { buildInfo, versionLine } from '../build-info';

/** One option as parseArgs takes it. */
type ParseArgsOptionDescriptor = NonNullable<ParseArgsConfig['options']>[string];

/** What a string option's value must look like; checked before the command sees it. */
export type OptionValueKind = 'number' | 'numbers';

export type CommandOption = ParseArgsOptionDescriptor & {
  /** One line for `--help`. */
  readonly description?: string;
  /** `number`: one finite number; `numbers`: a comma-separated list of them. */
  readonly value?: OptionValueKind;
};

export type CommandOptions = Readonly<Record<string, CommandOption>>;

export interface CommandLineSpec<T extends CommandOptions> {
  /** How the user runs it, the first line of `--help`: `npm run bench:limits -- [options]`. */
  readonly usage: string;
  /** What it does, a few lines under the usage line. */
  readonly summary?: string;
  /** The whole `--help` text, for commands that write their own (it must start with the usage line). */
  readonly helpText?: string;
  readonly options: T;
  /** Negative boolean flags (`--no-pin`). */
  readonly allowNegative?: boolean;
  /** Positional arguments accepted (none by default: a stray word is more often a missing `--`). */
  readonly allowPositionals?: boolean;
  /** Defaults to `process.argv.slice(2)`. */
  readonly argv?: readonly string[];
}

/** The outcome without side effects, for tests and for callers that print on their own. */
export type CommandLineOutcome<T extends CommandOptions> =
  | { readonly kind: 'values'; readonly values: ParsedValues<T>; readonly positionals: string[] }
  | { readonly kind: 'exit'; readonly code: 0 | 2; readonly stdout?: string; readonly stderr?: string };

type ParsedValues<T extends CommandOptions> = ReturnType<
  typeof parseArgs<{ options: T; allowNegative: true; allowPositionals: true }>
>['values'];

/** Interprets `argv`; `name` is the command as the user typed it, the prefix of every error line. */
export function interpretCommandLine<T extends CommandOptions>(
  name: string,
  spec: CommandLineSpec<T>,
): CommandLineOutcome<T> {
  const argv = [...(spec.argv ?? process.argv.slice(2))].filter((token) => token !== '--');
  if (argv.includes('--help') || argv.includes('-h')) return { kind: 'exit', code: 0, stdout: `${helpText(spec)}\n` };
  if (argv.includes('--version')) return { kind: 'exit', code: 0, stdout: `${versionLine(buildInfo())}\n` };
  const usageError = (message: string): CommandLineOutcome<T> => ({
    kind: 'exit',
    code: 2,
    stderr: `${name}: ${message} (see --help)\n`,
  });

  let parsed: { values: Record<string, unknown>; positionals: string[] };
  try {
    parsed = parseArgs({
      args: argv,
      options: parseArgsOptions(spec.options),
      allowNegative: spec.allowNegative ?? false,
      allowPositionals: spec.allowPositionals ?? false,
      strict: true,
    });
  } catch (error) {
    return usageError(describeParseError(error, spec.options));
  }
  for (const [key, option] of Object.entries(spec.options)) {
    const raw = parsed.values[key];
    if (option.value === undefined || typeof raw !== 'string') continue;
    const items = option.value === 'numbers' ? raw.split(',').map((item) => item.trim()) : [raw.trim()];
    const bad = items.find((item) => item === '' || !Number.isFinite(Number(item)));
    if (bad !== undefined) {
      const expected = option.value === 'numbers' ? 'a comma-separated list of numbers' : 'a number';
      return usageError(`--${key}: ${JSON.stringify(raw)} is not ${expected}`);
    }
  }
  return { kind: 'values', values: parsed.values as ParsedValues<T>, positionals: parsed.positionals };
}

/**
 * Interprets the process's command line: prints help, the version or a usage error and exits, or returns the values.
 * `name` defaults to the usage line's command (`npm run bench:limits`).
 */
export function parseCommandLine<T extends CommandOptions>(spec: CommandLineSpec<T>, name?: string): ParsedValues<T> {
  const launched = {
    ...spec,
    usage: usageAsLaunched(spec.usage),
    ...(spec.helpText === undefined ? {} : { helpText: usageAsLaunched(spec.helpText) }),
  };
  const outcome = interpretCommandLine(name ?? commandName(launched.usage), launched);
  if (outcome.kind === 'values') return outcome.values;
  if (outcome.stdout !== undefined) process.stdout.write(outcome.stdout);
  if (outcome.stderr !== undefined) process.stderr.write(outcome.stderr);
  process.exit(outcome.code);
}

/**
 * The installed package's launcher (tools/package/kvroute.mjs) runs the same bundles as `kvroute <command>` and says
 * so in KVROUTE_LAUNCHED_AS: a usage line that starts `npm run demo --` then reads `kvroute demo`.
 */
export function usageAsLaunched(
  usage: string,
  env: Readonly<Record<string, string | undefined>> = process.env,
): string {
  const launchedAs = env['KVROUTE_LAUNCHED_AS'];
  if (launchedAs === undefined || launchedAs === '') return usage;
  // The checkout's usage line may name the installed form beside it: redundant once it is the one shown.
  return usage.replace(/^npm run \S+( --)?/, launchedAs).replace(/^([^\n]*?)\s+\(installed: [^)\n]*\)/, '$1');
}

/** `npm run bench:limits -- [options]` → `npm run bench:limits`; `kvroute demo [options]` → `kvroute demo`. */
function commandName(usage: string): string {
  const firstLine = usage.split('\n')[0] ?? usage;
  return firstLine.split(/\s+(?=--(?:\s|$)|\[|<|--[a-z])/)[0]?.trim() || firstLine;
}

/** parseArgs's own descriptors: ours without the keys parseArgs does not know. */
function parseArgsOptions(options: CommandOptions): Record<string, ParseArgsOptionDescriptor> {
  const result: Record<string, ParseArgsOptionDescriptor> = {};
  for (const [key, { description: _description, value: _value, ...descriptor }] of Object.entries(options))
    result[key] = descriptor;
  return result;
}

/** parseArgs's errors are several sentences with advice about positionals; one clause naming the flag is enough. */
function describeParseError(error: unknown, options: CommandOptions): string {
  const code = (error as { code?: string }).code;
  const message = error instanceof Error ? error.message : String(error);
  const flag = /'(-{1,2}[^' ]+)/.exec(message)?.[1];
  switch (code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION': {
      const suggestion = flag === undefined ? undefined : nearestOption(flag.replace(/^-+/, ''), options);
      return `unknown flag ${flag ?? ''}${suggestion === undefined ? '' : ` (did you mean --${suggestion}?)`}`.trim();
    }
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE':
      return flag !== undefined && /argument missing/.test(message)
        ? `${flag} expects a value`
        : `${flag ?? 'a flag'}: ${message.split('.')[0]}`;
    case 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL': {
      const word = /'([^']*)'/.exec(message)?.[1];
      return `unexpected argument ${JSON.stringify(word ?? '')}; options are given as --name value`;
    }
    default:
      return message.split('\n')[0] ?? message;
  }
}

function nearestOption(typed: string, options: CommandOptions): string | undefined {
  return closestName(typed, Object.keys(options));
}

/**
 * The known name nearest `typed` by edit distance, when near enough to be the intended one (at most a third of its
 * letters wrong, at least one allowed); else undefined. Case and `-`/`_` are ignored (`--timeScale`, `--time_scale`).
 */
export function closestName(typed: string, known: readonly string[]): string | undefined {
  const squash = (name: string) => name.replace(/[-_]/g, '').toLowerCase();
  const target = squash(typed);
  let best: { name: string; distance: number } | undefined;
  for (const name of known) {
    const distance = editDistance(target, squash(name));
    if (best === undefined || distance < best.distance) best = { name, distance };
  }
  if (best === undefined) return undefined;
  return best.distance <= Math.max(1, Math.floor(target.length / 3)) ? best.name : undefined;
}

/** Damerau–Levenshtein distance (optimal string alignment): a swap of two neighbours counts as one edit. */
export function editDistance(a: string, b: string): number {
  const rows = a.length + 1;
  const columns = b.length + 1;
  const table = Array.from({ length: rows }, (_, row) =>
    Array.from({ length: columns }, (_, column) => (row === 0 ? column : column === 0 ? row : 0)),
  );
  const at = (row: number, column: number) => table[row]?.[column] ?? 0;
  for (let row = 1; row < rows; row += 1) {
    for (let column = 1; column < columns; column += 1) {
      const cost = a[row - 1] === b[column - 1] ? 0 : 1;
      let distance = Math.min(at(row - 1, column) + 1, at(row, column - 1) + 1, at(row - 1, column - 1) + cost);
      if (row > 1 && column > 1 && a[row - 1] === b[column - 2] && a[row - 2] === b[column - 1])
        distance = Math.min(distance, at(row - 2, column - 2) + 1);
      (table[row] as number[])[column] = distance;
    }
  }
  return at(a.length, b.length);
}

function helpText<T extends CommandOptions>(spec: CommandLineSpec<T>): string {
  if (spec.helpText !== undefined) return spec.helpText;
  const lines = [spec.usage];
  if (spec.summary !== undefined) lines.push('', ...spec.summary.split('\n').map((line) => `  ${line}`));
  const entries = Object.entries(spec.options).map(([key, option]) => {
    const negatable = option.type === 'boolean' && spec.allowNegative === true ? `--[no-]${key}` : `--${key}`;
    const heading =
      option.type === 'string'
        ? `${negatable} ${option.value === 'numbers' ? 'N,N…' : option.value === 'number' ? 'N' : 'VALUE'}`
        : negatable;
    const facts = [option.description ?? ''];
    // A boolean off by default says nothing a reader would miss.
    if (option.default !== undefined && option.default !== false) facts.push(`(default ${String(option.default)})`);
    return [heading, facts.filter(Boolean).join(' ')] as const;
  });
  entries.push(['-h, --help', 'this text'], ['--version', 'the version and commit of this build']);
  const width = Math.max(...entries.map(([heading]) => heading.length));
  lines.push('', ...entries.map(([heading, text]) => `  ${heading.padEnd(width)}  ${text}`.trimEnd()));
  return lines.join('\n');
}
