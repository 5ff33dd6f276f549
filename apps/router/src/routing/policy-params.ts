import {
  describeRange,
  isChoiceParam,
  POLICIES,
  policySettingKeys,
  type ChoiceParamSpec,
  type NumberParamSpec,
  type PolicyDefinitions,
  type PolicySettingKey,
  type PolicySettings,
} from '@kvroute/routing';
import { z } from 'zod';

/**
 * The router's policy config keys, derived from the policies' parameter tables (libs/routing: each
 * policy file declares its parameters once; `policySettingKeys` lists the config keys they name).
 * A key set by one policy has that parameter's default, range and doc; a key several policies share
 * (`minMatchBlocks`, `saturationInflight`, `loadFactor`) sets each of their parameters, and left
 * unset keeps each policy's own default (it has a default of its own only when they all agree).
 */
export type PolicyConfigShape<D extends PolicyDefinitions> = {
  readonly [K in keyof PolicySettings<D>]-?: z.ZodType<PolicySettings<D>[K], unknown>;
};

/** The zod fields for RouterConfig, one per config key the tables of `definitions` name, in table order. */
export function policyConfigFields<D extends PolicyDefinitions = typeof POLICIES>(
  definitions?: D,
): PolicyConfigShape<D> {
  const fields: Record<string, z.ZodType> = {};
  for (const entry of policySettingKeys(definitions ?? POLICIES)) fields[entry.key] = configField(entry);
  return fields as unknown as PolicyConfigShape<D>;
}

function configField({ key, rows }: PolicySettingKey): z.ZodType {
  const specs = rows.map((row) => row.spec);
  const defaults = new Set(specs.map((spec) => spec.default));
  const shared = defaults.size === 1 ? specs[0]?.default : undefined;
  const doc =
    rows.length === 1
      ? `${rows[0]?.policy}: ${rows[0]?.spec.doc}`
      : rows
          .map((row) => {
            const param = row.param === key ? '' : ` (${row.param})`;
            const fallback = shared === undefined ? ` (default ${row.spec.default})` : '';
            return `${row.policy}${param}: ${row.spec.doc}${fallback}`;
          })
          .join('; ') + (shared === undefined ? "; unset = each policy's own default" : '');
  if (specs.every(isChoiceParam)) {
    const values = (specs[0] as ChoiceParamSpec).values;
    if (specs.some((spec) => spec.values.join() !== values.join()))
      throw new TypeError(`config key ${key}: its parameters take different values`);
    const field = z.enum(values);
    return (shared === undefined ? field.optional() : field.default(shared as never)).describe(doc);
  }
  if (specs.some(isChoiceParam)) throw new TypeError(`config key ${key} sets both numbers and choices`);
  const range = strictest(specs as NumberParamSpec[]);
  let field = z.coerce.number();
  if (range.integer === true) field = field.int();
  field = range.exclusiveMin === true ? field.gt(range.min) : field.min(range.min);
  if (range.max !== undefined) field = field.max(range.max);
  const units = [...new Set((specs as NumberParamSpec[]).map((spec) => spec.unit).filter((unit) => unit !== ''))];
  const described = `${doc} (${[...units, describeRange(range)].join('; ')})`;
  return (shared === undefined ? field.optional() : field.default(shared as number)).describe(described);
}

/** The range every parameter of a shared key accepts: the largest minimum, the smallest maximum, integer if any is. */
function strictest(specs: readonly NumberParamSpec[]): NumberParamSpec {
  let range: NumberParamSpec = { default: 0, min: Number.NEGATIVE_INFINITY, unit: '', doc: '' };
  for (const spec of specs) {
    const min =
      spec.min > range.min || (spec.min === range.min && spec.exclusiveMin === true)
        ? { min: spec.min, exclusiveMin: spec.exclusiveMin }
        : { min: range.min, exclusiveMin: range.exclusiveMin };
    const max = spec.max === undefined ? range.max : Math.min(spec.max, range.max ?? Number.POSITIVE_INFINITY);
    range = {
      ...range,
      ...min,
      ...(max === undefined ? {} : { max }),
      ...(spec.integer === true || range.integer === true ? { integer: true } : {}),
    };
  }
  return range;
}
