/**
 * Where a config schema would drop a config file's unknown key without a word: a nested `z.object` (zod's default
 * strips unknown keys). The loader refuses unknown top-level keys itself; nested mappings must be `z.strictObject`
 * (or `z.looseObject` on purpose), and each app's test asserts this finds none, so a new section cannot reopen the
 * hole that let `polcy: roundrobin` through.
 */
import { z } from 'zod';

/** Dotted paths (`backends[].kvEvents`) of the nested objects in `schema` that strip unknown keys. */
export function findLenientObjects(schema: z.core.$ZodType): string[] {
  const found: string[] = [];
  const seen = new Set<z.core.$ZodType>();
  const visit = (current: z.core.$ZodType, path: string): void => {
    if (seen.has(current)) return;
    seen.add(current);
    const def = current._zod.def as unknown as Record<string, unknown>;
    if (current instanceof z.core.$ZodObject) {
      if (current._zod.def.catchall === undefined && path !== '') found.push(path);
      for (const [key, field] of Object.entries(current._zod.def.shape))
        visit(field, path === '' ? key : `${path}.${key}`);
      return;
    }
    for (const inner of ['innerType', 'in', 'out', 'valueType'] as const) {
      const child = def[inner];
      if (child instanceof z.core.$ZodType) visit(child, path);
    }
    if (def['element'] instanceof z.core.$ZodType) visit(def['element'], `${path}[]`);
    if (Array.isArray(def['options']))
      for (const option of def['options']) if (option instanceof z.core.$ZodType) visit(option, path);
  };
  visit(schema, '');
  return found;
}
