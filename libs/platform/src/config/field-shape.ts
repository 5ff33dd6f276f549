/**
 * What the config loader needs to know about one top-level schema field: which kind of value a string from env or a
 * flag must become, the allowed values of an enum, the default and the `.describe()` text for `--help`.
 *
 * zod 4 exposes schema structure through `schema._zod.def` (the documented surface for library authors). The
 * `instanceof` checks use the `z.core.$Zod*` constructors, which match by trait, so they accept schemas from both
 * `zod` and `zod/mini`.
 */
import { z } from 'zod';

/**
 * `object` fields are nested sections that only a config file can set. `other` covers everything the loader cannot
 * coerce precisely (unions of mixed types, records, dates…): a string from env or a flag is handed to zod as is.
 */
export type FieldKind = 'string' | 'number' | 'boolean' | 'enum' | 'array' | 'object' | 'other';

/** Values an enum-like field accepts; literals may be numbers or booleans, so they are kept as primitives. */
export type EnumValue = string | number | boolean | bigint | symbol | null | undefined;

export interface FieldShape {
  kind: FieldKind;
  /** Allowed values when `kind` is `enum`, or when `kind` is `array` of an enum (for the elements). */
  enumValues: readonly EnumValue[];
  /** Kind of each element when `kind` is `array`; `other` otherwise. */
  elementKind: Exclude<FieldKind, 'array' | 'object'>;
  /** Present only when the schema supplies a default (`.default()` or `.prefault()`). */
  defaultValue?: { value: unknown };
  /** True when the field may be left unset (optional, or has a default). */
  optional: boolean;
  description?: string;
}

/** Inspects one field schema, looking through optional / nullable / default / readonly / pipe wrappers. */
export function describeField(field: z.core.$ZodType): FieldShape {
  let current: z.core.$ZodType = field;
  let description = descriptionOf(current);
  let defaultValue: FieldShape['defaultValue'];
  let optional = false;

  // Wrappers never nest deeply in practice; the bound protects against a cyclic lazy schema.
  for (let depth = 0; depth < 16; depth += 1) {
    const unwrapped = unwrapOnce(current);
    if (unwrapped === null) break;
    if (current instanceof z.core.$ZodDefault || current instanceof z.core.$ZodPrefault) {
      // defaultValue may be a getter (zod evaluates function defaults lazily); reading it once here is harmless.
      defaultValue ??= { value: current._zod.def.defaultValue };
      optional = true;
    }
    if (current instanceof z.core.$ZodOptional) optional = true;
    current = unwrapped;
    description ??= descriptionOf(current);
  }

  const base = classify(current);
  const shape: FieldShape = {
    kind: base.kind,
    enumValues: base.enumValues,
    elementKind: 'other',
    optional,
  };
  if (base.kind === 'array' && current instanceof z.core.$ZodArray) {
    const element = describeField(current._zod.def.element);
    shape.elementKind = element.kind === 'array' || element.kind === 'object' ? 'other' : element.kind;
    shape.enumValues = element.enumValues;
  }
  if (defaultValue !== undefined) shape.defaultValue = defaultValue;
  if (description !== undefined) shape.description = description;
  return shape;
}

function unwrapOnce(schema: z.core.$ZodType): z.core.$ZodType | null {
  if (
    schema instanceof z.core.$ZodOptional ||
    schema instanceof z.core.$ZodNullable ||
    schema instanceof z.core.$ZodDefault ||
    schema instanceof z.core.$ZodPrefault ||
    schema instanceof z.core.$ZodReadonly ||
    schema instanceof z.core.$ZodNonOptional ||
    schema instanceof z.core.$ZodCatch
  ) {
    return schema._zod.def.innerType;
  }
  // A pipe (`.transform()`, `.pipe()`) is parsed from its input side, so that side decides the coercion.
  if (schema instanceof z.core.$ZodPipe) return schema._zod.def.in;
  return null;
}

function classify(schema: z.core.$ZodType): { kind: FieldKind; enumValues: readonly EnumValue[] } {
  if (schema instanceof z.core.$ZodString) return { kind: 'string', enumValues: [] };
  if (schema instanceof z.core.$ZodNumber) return { kind: 'number', enumValues: [] };
  if (schema instanceof z.core.$ZodBoolean) return { kind: 'boolean', enumValues: [] };
  if (schema instanceof z.core.$ZodArray) return { kind: 'array', enumValues: [] };
  if (schema instanceof z.core.$ZodObject) return { kind: 'object', enumValues: [] };
  const enumValues = enumValuesOf(schema);
  if (enumValues !== null) return { kind: 'enum', enumValues };
  return { kind: 'other', enumValues: [] };
}

/** Values of an enum, a literal, or a union made only of those; null for anything else. */
function enumValuesOf(schema: z.core.$ZodType): EnumValue[] | null {
  if (schema instanceof z.core.$ZodEnum) return [...schema._zod.values];
  if (schema instanceof z.core.$ZodLiteral) return [...schema._zod.def.values];
  if (schema instanceof z.core.$ZodUnion) {
    const values: EnumValue[] = [];
    for (const option of schema._zod.def.options) {
      const optionValues = enumValuesOf(option);
      if (optionValues === null) return null;
      values.push(...optionValues);
    }
    return values;
  }
  return null;
}

function descriptionOf(schema: z.core.$ZodType): string | undefined {
  return z.globalRegistry.get(schema)?.description;
}
