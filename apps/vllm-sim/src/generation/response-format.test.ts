import { describe, expect, it } from 'vitest';
import { encodeSseData } from '@kvroute/protocols';
import {
  buildUsage,
  createDeltaEventEncoder,
  deltaChunk,
  terminalFingerprintOf,
  usageChunk,
  type EndpointKind,
} from './response-format';

const identity = {
  id: 'chatcmpl-abc"123',
  created: 1_761_204_418,
  model: 'Qwen/Qwen2.5-7B "quoted"',
  systemFingerprint: 'vllm-0.19.0-3f2a9c1d',
};

describe('createDeltaEventEncoder', () => {
  it.each<[EndpointKind, string, string | null, string | null]>([
    ['chat', ' word', null, null],
    ['chat', ' word', null, 'vllm-0.19.0-3f2a9c1d'],
    ['chat', ' last', 'length', null],
    ['chat', ' last', 'length', 'vllm-0.19.0-3f2a9c1d'],
    ['chat', 'quote " and \\ backslash\n', 'stop', 'fp "odd"'],
    ['text', ' word', null, 'vllm-0.19.0-3f2a9c1d'],
    ['text', ' end', 'length', null],
    ['text', ' end', 'length', 'vllm-0.19.0-3f2a9c1d'],
  ])('writes the same bytes as JSON.stringify for %s %j %s (fingerprint %s)', (kind, text, finish, fingerprint) => {
    const encode = createDeltaEventEncoder(kind, identity, fingerprint);
    for (const index of [0, 3]) {
      const encoded = encode(index, text, finish);
      expect(encoded).toBe(encodeSseData(JSON.stringify(deltaChunk(kind, identity, index, text, finish, fingerprint))));
      expect(JSON.parse(encoded.slice(6))).toEqual(deltaChunk(kind, identity, index, text, finish, fingerprint));
    }
  });
});

describe('what include_usage changes (as vLLM does it)', () => {
  it('stamps the fingerprint on terminal chunks only without include_usage, as the last key', () => {
    const without = terminalFingerprintOf(identity, false);
    const withUsage = terminalFingerprintOf(identity, true);
    expect(JSON.stringify(deltaChunk('chat', identity, 0, 'x', 'stop', without))).toMatch(
      /"choices":\[.*\],"system_fingerprint":"vllm-0\.19\.0-3f2a9c1d"}$/,
    );
    expect(JSON.stringify(deltaChunk('chat', identity, 0, 'x', null, without))).not.toContain('system_fingerprint');
    expect(JSON.stringify(deltaChunk('chat', identity, 0, 'x', 'stop', withUsage))).not.toContain('system_fingerprint');
    expect(JSON.stringify(deltaChunk('text', identity, 0, 'x', 'length', without))).toMatch(
      /"usage":null,"system_fingerprint":"vllm-0\.19\.0-3f2a9c1d"}$/,
    );
  });

  it('writes the usage chunk without null fields (exclude_none), the fingerprint last', () => {
    const miss = usageChunk(
      'chat',
      identity,
      buildUsage({ promptTokens: 10, completionTokens: 3, cachedTokens: null }),
    );
    expect(JSON.stringify(miss)).toBe(
      '{"id":"chatcmpl-abc\\"123","object":"chat.completion.chunk","created":1761204418,"model":"Qwen/Qwen2.5-7B \\"quoted\\"","choices":[],' +
        '"usage":{"prompt_tokens":10,"total_tokens":13,"completion_tokens":3},"system_fingerprint":"vllm-0.19.0-3f2a9c1d"}',
    );
    const hit = usageChunk(
      'text',
      { ...identity, systemFingerprint: null },
      buildUsage({ promptTokens: 40, completionTokens: 2, cachedTokens: 32 }),
    );
    expect(JSON.stringify(hit)).toMatch(
      /"object":"text_completion".*"usage":\{"prompt_tokens":40,"total_tokens":42,"completion_tokens":2,"prompt_tokens_details":\{"cached_tokens":32\}\}}$/,
    );
  });
});
