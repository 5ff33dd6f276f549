import { describe, expect, it } from 'vitest';
import { forwardedBody } from './parse';

const bodyOf = (value: object) => Buffer.from(JSON.stringify(value));

describe('forwardedBody', () => {
  it('forwards the bytes as they came when nothing is to change', () => {
    expect(forwardedBody(bodyOf({ model: 'm' }), { model: 'm' }, { asksUsage: false, salt: null })).toBeNull();
  });

  it("splices the tenant's salt (and the usage request) in front, keeping the client's bytes", () => {
    const raw = Buffer.from('{ "model":"m",  "stream":true }');
    const out = forwardedBody(raw, { model: 'm', stream: true }, { asksUsage: true, salt: 'SALT' });
    expect(out?.toString()).toBe(
      '{"stream_options":{"include_usage":true},"cache_salt":"SALT", "model":"m",  "stream":true }',
    );
    expect(JSON.parse(out!.toString())).toEqual({
      model: 'm',
      stream: true,
      stream_options: { include_usage: true },
      cache_salt: 'SALT',
    });
  });

  it("replaces a client's own cache_salt (duplicates included) by the tenant's", () => {
    const raw = Buffer.from('{"model":"m","cache_salt":"mine","cache_salt":"again"}');
    const parsed = JSON.parse(raw.toString()) as Record<string, unknown>;
    const out = forwardedBody(raw, parsed, { asksUsage: false, salt: 'TENANT' });
    expect(out?.toString()).toBe('{"model":"m","cache_salt":"TENANT"}');
  });
});
