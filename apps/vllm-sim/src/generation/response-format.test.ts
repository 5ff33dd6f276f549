import { describe, expect, it } from 'vitest';
import { encodeSseData } from '@kvroute/protocols';
import { createDeltaEventEncoder, deltaChunk, type EndpointKind } from './response-format';

describe('createDeltaEventEncoder', () => {
  const identity = { id: 'chatcmpl-abc"123', created: 1_761_204_418, model: 'Qwen/Qwen2.5-7B "quoted"' };
  it.each<[EndpointKind, string, string | null]>([
    ['chat', ' word', null],
    ['chat', ' last', 'length'],
    ['chat', 'quote " and \\ backslash\n', 'stop'],
    ['text', ' word', null],
    ['text', ' end', 'length'],
  ])('writes the same bytes as JSON.stringify for %s %j %s', (kind, text, finish) => {
    const encode = createDeltaEventEncoder(kind, identity);
    for (const index of [0, 3]) {
      const encoded = encode(index, text, finish);
      expect(encoded).toBe(encodeSseData(JSON.stringify(deltaChunk(kind, identity, index, text, finish))));
      expect(JSON.parse(encoded.slice(6))).toEqual(deltaChunk(kind, identity, index, text, finish));
    }
  });
});
