import { describe, expect, it } from 'vitest';
import {
  bootstrapRoom,
  disaggregationFieldsIn,
  MAX_PREFILL_PARAMS_BYTES,
  nixlDecodeBody,
  nixlPrefillBody,
  prefillCachedTokensOf,
  prefillParamsOf,
  sglangBootstrapBody,
} from './disaggregated-legs';

const client = {
  model: 'm',
  messages: [{ role: 'user', content: 'hi' }],
  stream: true,
  stream_options: { include_usage: true },
  max_tokens: 200,
  max_completion_tokens: 200,
  min_tokens: 5,
  temperature: 0.2,
};

const answerParams = {
  do_remote_prefill: true,
  do_remote_decode: false,
  remote_block_ids: [[1, 2, 3]],
  remote_engine_id: 'engine-7',
  remote_request_id: 'req-internal',
  remote_host: '10.0.0.7',
  remote_port: 5600,
  tp_size: 1,
};

describe('prefill/decode leg bodies', () => {
  it('vLLM leg 1: the toy proxy body (remote decode, no stream, one token, no min_tokens), the client body untouched', () => {
    const before = structuredClone(client);
    expect(nixlPrefillBody(client)).toEqual({
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
      stream: false,
      max_tokens: 1,
      max_completion_tokens: 1,
      temperature: 0.2,
      kv_transfer_params: {
        do_remote_decode: true,
        do_remote_prefill: false,
        remote_engine_id: null,
        remote_block_ids: null,
        remote_host: null,
        remote_port: null,
      },
    });
    expect(client).toEqual(before);
    // max_completion_tokens appears only when the client sent it.
    const { max_completion_tokens: _dropped, ...withoutIt } = client;
    expect(Object.hasOwn(nixlPrefillBody(withoutIt), 'max_completion_tokens')).toBe(false);
  });

  it('vLLM leg 2: the client body with the prefill answer params forwarded untouched, or as it came without any', () => {
    const leg = nixlDecodeBody(client, answerParams);
    expect(leg).toEqual({ ...client, kv_transfer_params: answerParams });
    expect(leg.kv_transfer_params).toBe(answerParams);
    expect(nixlDecodeBody(client, null)).toBe(client);
  });

  it('takes only well-formed prefill params; malformed ones are reported, absent ones are not', () => {
    expect(prefillParamsOf({ kv_transfer_params: answerParams })).toEqual({ params: answerParams, malformed: false });
    expect(prefillParamsOf({ kv_transfer_params: null })).toEqual({ params: null, malformed: false });
    expect(prefillParamsOf({ id: 'x' })).toEqual({ params: null, malformed: false });
    expect(prefillParamsOf('not an object')).toEqual({ params: null, malformed: false });
    for (const bad of [
      'yes',
      [answerParams],
      { ...answerParams, do_remote_prefill: false },
      { ...answerParams, remote_engine_id: 7 },
      { ...answerParams, remote_block_ids: 'all' },
      { ...answerParams, remote_block_ids: [Array.from({ length: MAX_PREFILL_PARAMS_BYTES / 4 }, () => 12345)] },
    ]) {
      expect(prefillParamsOf({ kv_transfer_params: bad })).toEqual({ params: null, malformed: true });
    }
  });

  it("reads the prefill engine's cached tokens from its answer's usage: 0 when it says none, null without usage", () => {
    const usage = { prompt_tokens: 900, completion_tokens: 1, total_tokens: 901 };
    expect(prefillCachedTokensOf({ usage: { ...usage, prompt_tokens_details: { cached_tokens: 512 } } })).toBe(512);
    expect(prefillCachedTokensOf({ usage: { ...usage, prompt_tokens_details: null } })).toBe(0);
    expect(prefillCachedTokensOf({ usage })).toBe(0);
    expect(prefillCachedTokensOf({ usage: { ...usage, prompt_tokens_details: { cached_tokens: -3 } } })).toBe(0);
    expect(prefillCachedTokensOf({ usage: null })).toBeNull();
    expect(prefillCachedTokensOf({ id: 'x' })).toBeNull();
    expect(prefillCachedTokensOf('text')).toBeNull();
  });

  it('SGLang: the same body for both engines with the bootstrap fields; rooms are exact integers below 2^53', () => {
    expect(sglangBootstrapBody(client, { host: '10.0.0.8', port: 8998, room: 42 })).toEqual({
      ...client,
      bootstrap_host: '10.0.0.8',
      bootstrap_port: 8998,
      bootstrap_room: 42,
    });
    expect(bootstrapRoom(() => 0)).toBe(0);
    const top = bootstrapRoom(() => 0.999_999_999_9);
    expect(Number.isSafeInteger(top)).toBe(true);
    expect(top).toBeGreaterThan(2 ** 52);
  });

  it('names the disaggregation fields a client set, even null ones', () => {
    expect(disaggregationFieldsIn(client)).toEqual([]);
    expect(disaggregationFieldsIn({ ...client, kv_transfer_params: null, bootstrap_room: 1 })).toEqual([
      'kv_transfer_params',
      'bootstrap_room',
    ]);
  });
});
