import { describe, expect, it } from 'vitest';
import { describeSource, withoutCredentials } from './config-error';

describe('config errors never echo credentials', () => {
  it('masks the userinfo of every URL in a value, and nothing else', () => {
    expect(withoutCredentials('http://:supersecret@x:1')).toBe('http://***@x:1');
    expect(withoutCredentials('redis://user:p@ss@host:6379/0')).toBe('redis://***@host:6379/0');
    expect(withoutCredentials('redis+cluster://:pw@a:1,b:2')).toBe('redis+cluster://***@a:1,b:2');
    expect(withoutCredentials('http://host:8000,http://u:p@h2:1')).toBe('http://host:8000,http://***@h2:1');
    expect(withoutCredentials('redis://host:6379')).toBe('redis://host:6379');
    expect(withoutCredentials('fastest')).toBe('fastest');
    // Passwords with the characters a URL would split on, as the cluster URL parser accepts them.
    expect(withoutCredentials('redis+clustr://:Ab/c9@h:7000')).toBe('redis+clustr://***@h:7000');
    expect(withoutCredentials('redis://:a,b@h:1,http://u:p@h2:2')).toBe('redis://***@h:1,http://***@h2:2');
  });

  it('describes an env or flag source with the value masked', () => {
    expect(describeSource({ kind: 'env', name: 'KVROUTE_REDIS_URL', raw: 'http://:hunter2@redis:6379' })).toBe(
      'from env KVROUTE_REDIS_URL="http://***@redis:6379"',
    );
    expect(describeSource({ kind: 'flag', name: 'backends', raw: 'http://a:b@h:1' })).toBe(
      'from flag --backends="http://***@h:1"',
    );
  });
});
