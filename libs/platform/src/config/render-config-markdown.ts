import type { ConfigSchema } from './config-options';
import { describeField } from './field-shape';
import { toEnvName, toFlagName } from './option-names';
import { flagRefusedBecause } from './secret-option';

/**
 * A Markdown table of every option of an app's config schema: file key, flag, env var, type, default,
 * description. docs/configuration.md is generated from it, and each app has a test that fails when
 * the checked-in doc no longer matches its schema.
 */
export function renderConfigMarkdown(
  schema: ConfigSchema,
  options: { title: string; envPrefix: string; intro?: string },
): string {
  const lines = [`## ${options.title}`, ''];
  if (options.intro) lines.push(options.intro, '');
  lines.push('| key (file) | flag | env | type | default | meaning |', '|---|---|---|---|---|---|');
  for (const [key, field] of Object.entries(schema.shape)) {
    const shape = describeField(field as Parameters<typeof describeField>[0]);
    const type =
      shape.kind === 'enum'
        ? shape.enumValues.map(String).join(' \\| ')
        : shape.kind === 'array'
          ? 'list'
          : shape.kind === 'object'
            ? 'object (file only)'
            : shape.kind === 'other'
              ? 'value'
              : shape.kind;
    const defaultText = shape.defaultValue
      ? `\`${JSON.stringify(shape.defaultValue.value)}\``
      : shape.optional
        ? 'unset'
        : '**required**';
    const secret = flagRefusedBecause(field as Parameters<typeof describeField>[0]) !== undefined;
    const flag =
      shape.kind === 'object' ? '' : secret ? 'refused (secret: env or file only)' : `\`--${toFlagName(key)}\``;
    const env = shape.kind === 'object' ? '' : `\`${toEnvName(key, options.envPrefix)}\``;
    lines.push(
      `| \`${key}\` | ${flag} | ${env} | ${type} | ${defaultText} | ${(shape.description ?? '').replaceAll('|', '\\|')} |`,
    );
  }
  return `${lines.join('\n')}\n`;
}
