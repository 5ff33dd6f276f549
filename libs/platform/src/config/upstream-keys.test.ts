import { describe, expect, it } from 'vitest';
import { loadUpstreamKeys, upstreamPlaceOf, UpstreamKeyError } from './upstream-keys';

const files: Record<string, string> = {
  '/keys/fleet': 'fleet-key\n',
  '/keys/b': '  b-key  \n',
  '/keys/empty': '\n',
  '/keys/two-lines': 'a\nb\n',
};
const readFile = (path: string): string => {
  const text = files[path];
  if (text === undefined) throw Object.assign(new Error(`ENOENT: ${path}`), { code: 'ENOENT' });
  return text;
};

describe('loadUpstreamKeys', () => {
  it('gives a backend its own key, other configured backends the fleet key, and added ones none unless opted in', () => {
    const config = {
      upstreamApiKeyFile: '/keys/fleet',
      upstreamApiKeyForAddedBackends: false,
      backends: [
        'http://a:8000',
        { url: 'http://b:8000/v1/', apiKeyFile: '/keys/b' },
        { url: 'http://c:8000', apiKeyEnv: 'C_KEY' },
      ],
    };
    const keys = loadUpstreamKeys(config, { env: { C_KEY: 'c-key' }, readFile });
    expect(keys.keyFor('http://a:8000/')).toBe('fleet-key');
    expect(keys.keyFor('http://b:8000')).toBe('b-key');
    expect(keys.authorizationFor('http://c:8000/v1')).toBe('Bearer c-key');
    expect(keys.keyFor('http://added:8000')).toBeNull();
    expect(
      loadUpstreamKeys(
        { ...config, upstreamApiKeyForAddedBackends: true },
        { env: { C_KEY: 'c-key' }, readFile },
      ).keyFor('http://added:8000'),
    ).toBe('fleet-key');
  });

  it('binds a key to the place, not the host alone: another port or API path is another backend', () => {
    const keys = loadUpstreamKeys(
      { upstreamApiKeyForAddedBackends: false, backends: [{ url: 'http://b:8000/engine-1', apiKeyFile: '/keys/b' }] },
      { env: {}, readFile },
    );
    expect(keys.keyFor('http://b:8000/engine-1/v1')).toBe('b-key');
    expect(keys.keyFor('http://b:8001/engine-1')).toBeNull();
    expect(keys.keyFor('http://b:8000/engine-2')).toBeNull();
  });

  it('keeps keys out of serialisation and summaries', () => {
    const keys = loadUpstreamKeys(
      {
        upstreamApiKeyFile: '/keys/fleet',
        upstreamApiKeyForAddedBackends: false,
        backends: [{ url: 'http://b:8000', apiKeyFile: '/keys/b' }],
      },
      { env: {}, readFile },
    );
    expect(JSON.stringify(keys)).not.toContain('key');
    expect(JSON.stringify(keys.summary())).toBe(
      '{"backendsWithOwnKey":1,"fleetKey":true,"fleetKeyForAddedBackends":false}',
    );
  });

  it.each([
    [{ upstreamApiKeyFile: '/keys/missing' }, '/keys/missing (ENOENT)'],
    [{ upstreamApiKeyFile: '/keys/empty' }, 'is empty or unset'],
    [{ upstreamApiKeyFile: '/keys/two-lines' }, 'more than one line'],
    [{ upstreamApiKeyEnv: 'UNSET' }, 'the environment variable UNSET is empty or unset'],
    [{ upstreamApiKeyFile: '/keys/fleet', upstreamApiKeyEnv: 'X' }, 'not both'],
  ])('fails the start on %j, naming the source', (fleet, message) => {
    expect(() =>
      loadUpstreamKeys({ ...fleet, upstreamApiKeyForAddedBackends: false, backends: [] }, { env: {}, readFile }),
    ).toThrow(UpstreamKeyError);
    expect(() =>
      loadUpstreamKeys({ ...fleet, upstreamApiKeyForAddedBackends: false, backends: [] }, { env: {}, readFile }),
    ).toThrow(message);
  });

  it('places drop trailing slashes and /v1 as the router registry does', () => {
    expect(upstreamPlaceOf('http://h:1/v1/')).toBe('http://h:1');
    expect(upstreamPlaceOf('https://h/base/')).toBe('https://h/base');
  });
});
