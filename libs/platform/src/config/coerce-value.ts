/**
 * Turns the string an env var or flag carries into the type its schema field expects. Coercion never rejects: a
 * string it cannot convert is returned unchanged, so zod reports it with its usual message and the loader adds where
 * the value came from. That keeps one source of truth for what is valid (the schema).
 */
import type { EnumValue, FieldShape } from './field-shape';

/** Spellings accepted for booleans, compared case-insensitively. Anything else goes to zod as a string. */
const TRUE_WORDS = new Set(['true', '1', 'yes', 'on']);
const FALSE_WORDS = new Set(['false', '0', 'no', 'off']);

/**
 * Coerces `raw` for `shape`. Arrays are comma-separated lists (`a, b,c` → ['a','b','c']; blanks dropped, so `''`
 * is the empty list). Object fields never reach here: they are config-file only.
 */
export function coerceValue(raw: string, shape: FieldShape): unknown {
  if (shape.kind === 'array') {
    return raw
      .split(',')
      .map((item) => item.trim())
      .filter((item) => item.length > 0)
      .map((item) => coerceScalar(item, shape.elementKind, shape.enumValues));
  }
  if (shape.kind === 'object') return raw;
  return coerceScalar(raw, shape.kind, shape.enumValues);
}

function coerceScalar(raw: string, kind: FieldShape['elementKind'], enumValues: readonly EnumValue[]): unknown {
  switch (kind) {
    case 'number': {
      const trimmed = raw.trim();
      const value = Number(trimmed);
      return trimmed.length > 0 && !Number.isNaN(value) ? value : raw;
    }
    case 'boolean': {
      const word = raw.trim().toLowerCase();
      if (TRUE_WORDS.has(word)) return true;
      if (FALSE_WORDS.has(word)) return false;
      return raw;
    }
    case 'enum': {
      // Enum members may be numbers or booleans (z.literal(2)); match on their string form.
      const match = enumValues.find((value) => String(value) === raw.trim());
      return match === undefined ? raw : match;
    }
    case 'string':
    case 'other':
      return raw;
  }
}
