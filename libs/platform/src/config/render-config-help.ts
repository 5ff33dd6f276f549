/**
 * `--help` text generated from the config schema, so the documentation of every option (flag, env var, type, default,
 * `.describe()` text) cannot drift from what the loader accepts.
 */
import { listConfigOptions, type ConfigOption, type ConfigSchema, type EnvMap } from './config-options';
import type { EnumValue, FieldShape } from './field-shape';
import { toEnvName } from './option-names';

export interface RenderConfigHelpOptions<S extends ConfigSchema = ConfigSchema> {
  /** Same prefix the loader uses, trailing underscore included. */
  envPrefix?: string;
  envMap?: EnvMap<S>;
  /** First line, e.g. `Usage: vllm-sim [options]`. */
  usage?: string;
  /** Flag naming the config file; default `config`. */
  fileFlag?: string;
}

const INDENT = '  ';
const DETAIL_INDENT = '      ';

export function renderConfigHelp<S extends ConfigSchema>(schema: S, options: RenderConfigHelpOptions<S> = {}): string {
  const envPrefix = options.envPrefix ?? '';
  const fileFlag = options.fileFlag ?? 'config';
  const configOptions = listConfigOptions(schema, { envPrefix, envMap: options.envMap ?? {}, fileFlag });
  const settable = configOptions.filter((option) => option.flag !== null);
  const secrets = configOptions.filter((option) => option.refusedFlag !== undefined);
  const fileOnly = configOptions.filter((option) => option.flag === null && option.refusedFlag === undefined);

  const lines: string[] = [];
  if (options.usage !== undefined) lines.push(options.usage, '');
  lines.push('Options:');
  lines.push(
    `${INDENT}--${fileFlag} <file>`,
    `${DETAIL_INDENT}YAML or JSON file with option values, keyed by the names in this help's "key:" lines.`,
    `${DETAIL_INDENT}env: ${toEnvName(fileFlag, envPrefix)}`,
  );
  for (const option of settable) lines.push(...renderOption(option));
  lines.push(`${INDENT}-h, --help`, `${DETAIL_INDENT}Print this help and exit.`);

  if (secrets.length > 0) {
    lines.push('', 'Secrets (env or config file only; their flags are refused: arguments show in ps):');
    for (const option of secrets) lines.push(...renderOption(option));
  }

  if (fileOnly.length > 0) {
    lines.push('', 'Config file only (nested sections):');
    for (const option of fileOnly) lines.push(...renderOption(option));
  }

  lines.push(
    '',
    'Precedence, lowest first: defaults < config file < env vars < flags. Empty env vars count as unset.',
    'Lists are comma-separated (a,b,c). Booleans accept true/false, 1/0, yes/no, on/off.',
  );
  return lines.join('\n');
}

function renderOption(option: ConfigOption): string[] {
  const { shape } = option;
  const heading =
    option.refusedFlag !== undefined
      ? `${INDENT}${option.key} <${typeLabel(shape)}>`
      : option.flag === null
        ? `${INDENT}${option.key} <object>`
        : shape.kind === 'boolean'
          ? `${INDENT}--[no-]${option.flag}`
          : `${INDENT}--${option.flag} <${typeLabel(shape)}>`;

  const facts = [`key: ${option.key}`];
  if (option.env !== null) facts.push(`env: ${option.env}`);
  if (shape.defaultValue !== undefined && shape.defaultValue.value !== undefined) {
    facts.push(`default: ${formatDefault(shape.defaultValue.value)}`);
  } else {
    facts.push(shape.optional ? 'optional' : 'required');
  }

  const lines = [heading];
  if (shape.description !== undefined) lines.push(`${DETAIL_INDENT}${shape.description}`);
  lines.push(`${DETAIL_INDENT}${facts.join('   ')}`);
  return lines;
}

function typeLabel(shape: FieldShape): string {
  switch (shape.kind) {
    case 'enum':
      return formatEnum(shape.enumValues);
    case 'array':
      return `${shape.elementKind === 'enum' ? formatEnum(shape.enumValues) : elementLabel(shape.elementKind)},...`;
    case 'other':
      return 'value';
    default:
      return shape.kind;
  }
}

function elementLabel(kind: FieldShape['elementKind']): string {
  return kind === 'other' ? 'value' : kind;
}

function formatEnum(values: readonly EnumValue[]): string {
  return values.map(String).join('|');
}

function formatDefault(value: unknown): string {
  if (typeof value === 'string') return value === '' ? '""' : value;
  if (Array.isArray(value)) return value.length === 0 ? '(empty list)' : value.map(String).join(',');
  return JSON.stringify(value) ?? String(value);
}
