import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { describeField } from './field-shape';

describe('describeField', () => {
  it('sees through default, optional and describe wrappers in either order', () => {
    expect(describeField(z.number().default(5).describe('outer'))).toMatchObject({
      kind: 'number',
      defaultValue: { value: 5 },
      optional: true,
      description: 'outer',
    });
    expect(describeField(z.string().describe('inner').optional())).toMatchObject({
      kind: 'string',
      optional: true,
      description: 'inner',
    });
  });

  it('marks a bare field as required with no default', () => {
    const shape = describeField(z.boolean());
    expect(shape.optional).toBe(false);
    expect(shape.defaultValue).toBeUndefined();
  });

  it('reports enum values, array element kinds and nested objects', () => {
    expect(describeField(z.enum(['a', 'b']))).toMatchObject({ kind: 'enum', enumValues: ['a', 'b'] });
    expect(describeField(z.array(z.enum(['x', 'y'])))).toMatchObject({
      kind: 'array',
      elementKind: 'enum',
      enumValues: ['x', 'y'],
    });
    expect(describeField(z.object({ url: z.string() }))).toMatchObject({ kind: 'object' });
  });

  it('classifies a transform by its input type', () => {
    expect(describeField(z.string().transform((value) => value.length)).kind).toBe('string');
  });
});
