import { describe, expect, it } from 'vitest';
import { duplicateKeysIn } from './json-duplicate-keys';

describe('duplicateKeysIn', () => {
  it('finds a key written twice in one object, which JSON.parse would fold into one', () => {
    const line = '{"level":"info","component":"http","component":"route","msg":"x"}';
    expect(JSON.parse(line)).toMatchObject({ component: 'route' });
    expect(duplicateKeysIn(line)).toEqual(['component']);
  });

  it('names nested duplicates by path and lets equal keys in different objects be', () => {
    const text = '{"a":{"b":1,"b":2},"list":[{"k":1},{"k":2,"k":3}],"k":0,"s":"\\"k\\":1"}';
    expect(duplicateKeysIn(text)).toEqual(['a.b', 'list[1].k']);
  });

  it('compares keys as decoded (an escaped spelling is the same key)', () => {
    expect(duplicateKeysIn('{"msg":1,"m\\u0073g":2}')).toEqual(['msg']);
  });

  it('refuses text that is not JSON', () => {
    expect(() => duplicateKeysIn('12:00:00.000 INFO  router: listening')).toThrow(SyntaxError);
    expect(() => duplicateKeysIn('{"a":1')).toThrow(SyntaxError);
  });
});
