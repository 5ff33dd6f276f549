import { describe, expect, it } from 'vitest';
import { API_KEY_PREFIX, credentialOf, digestOfApiKey, generateApiKey } from './api-key';
import { CacheSalter } from './cache-salt';

describe('API keys', () => {
  it('are random, prefixed, and stored as their SHA-256 only', () => {
    const one = generateApiKey();
    const two = generateApiKey();
    expect(one.secret.startsWith(API_KEY_PREFIX)).toBe(true);
    expect(one.secret).toHaveLength(API_KEY_PREFIX.length + 43);
    expect(one.secret).not.toBe(two.secret);
    expect(one.digest).toMatch(/^[0-9a-f]{64}$/);
    expect(digestOfApiKey(one.secret)).toBe(one.digest);
  });

  it('are read from Authorization: Bearer, else x-api-key; anything malformed or oversized is no credential', () => {
    expect(credentialOf({ authorization: 'Bearer kvr_abc' })).toBe('kvr_abc');
    expect(credentialOf({ authorization: 'bearer   kvr_abc ' })).toBe('kvr_abc');
    expect(credentialOf({ 'x-api-key': 'kvr_abc' })).toBe('kvr_abc');
    expect(credentialOf({ authorization: 'Basic dXNlcjpwYXNz' })).toBeNull();
    expect(credentialOf({ authorization: 'Bearer a b' })).toBeNull();
    expect(credentialOf({ authorization: `Bearer ${'k'.repeat(257)}` })).toBeNull();
    expect(credentialOf({})).toBeNull();
  });
});

describe('CacheSalter', () => {
  const salter = new CacheSalter(Buffer.from('a-secret-of-sixteen-bytes-or-more'));

  it('gives each scope its own salt, stable, in the characters vLLM accepts', () => {
    const a = salter.saltFor('tenant\u0000a', null);
    expect(a).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(salter.saltFor('tenant\u0000a', null)).toBe(a);
    expect(salter.saltFor('tenant\u0000b', null)).not.toBe(a);
    expect(new CacheSalter(Buffer.from('another-secret-of-sixteen-bytes')).saltFor('tenant\u0000a', null)).not.toBe(a);
  });

  it("keeps a client's own salt as a partition within its tenant", () => {
    const plain = salter.saltFor('tenant\u0000a', null);
    const own = salter.saltFor('tenant\u0000a', 'user-42');
    expect(own).not.toBe(plain);
    expect(salter.saltFor('tenant\u0000b', 'user-42')).not.toBe(own);
  });

  it('refuses a short secret', () => {
    expect(() => new CacheSalter(Buffer.from('short'))).toThrow(RangeError);
  });
});
