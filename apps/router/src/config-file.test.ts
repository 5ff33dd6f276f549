import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '@kvroute/platform';
import { describe, expect, it } from 'vitest';
import { ROUTER_CONFIG_FILE, ROUTER_ENV_PREFIX, RouterConfig } from './config';

describe('the fleet’s shared kvroute.yaml', () => {
  it('gives the router the common keys and its own section, and leaves the poller’s alone', () => {
    const dir = mkdtempSync(join(tmpdir(), 'router-config-'));
    try {
      const file = join(dir, 'kvroute.yaml');
      writeFileSync(
        file,
        [
          'backends: [http://10.0.0.1:8000]',
          'redisUrl: redis://127.0.0.1:6379',
          'policy: kvaware',
          'router:',
          '  port: 8081',
          'poller:',
          '  port: 9464',
          '  intervalMs: 2000',
          'failuresToUnhealthy: 3',
          'polcy_: x',
          '',
        ].join('\n'),
      );
      const loaded = loadConfig({
        schema: RouterConfig,
        argv: ['--config', file],
        env: {},
        envPrefix: ROUTER_ENV_PREFIX,
        sharedFile: ROUTER_CONFIG_FILE,
      });
      if (loaded.kind !== 'config') throw new Error('help');
      expect(loaded.config).toMatchObject({ port: 8081, policy: 'kvaware', redisUrl: 'redis://127.0.0.1:6379' });
      // Another app's key, and a key no app knows: logged at start, not an error.
      expect(loaded.ignoredFileKeys).toEqual(['failuresToUnhealthy', 'polcy_']);
      // A misspelling of a router key is still an error.
      writeFileSync(file, 'backends: [http://10.0.0.1:8000]\nredis_url: redis://x:6379\n');
      expect(() =>
        loadConfig({
          schema: RouterConfig,
          argv: ['--config', file],
          env: {},
          envPrefix: ROUTER_ENV_PREFIX,
          sharedFile: ROUTER_CONFIG_FILE,
        }),
      ).toThrow(/redis_url: unknown option/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('secrets on the command line (issue 30)', () => {
  const load = (argv: string[], env: Record<string, string> = {}) =>
    loadConfig({ schema: RouterConfig, argv, env, envPrefix: ROUTER_ENV_PREFIX });

  it('refuses --redis-url with a password, as --admin-token, without echoing it; takes one without', () => {
    const refused = () =>
      load(['--backends', 'http://10.0.0.1:8000', '--redis-url', 'redis://:s3cret-pw@10.0.0.9:6379']);
    expect(refused).toThrow(/--redis-url.*refused.*KVROUTE_REDIS_URL/s);
    expect(refused).not.toThrow(/s3cret-pw/);
    expect(() => load(['--backends', 'http://10.0.0.1:8000', '--admin-token', 'sixteen-chars-secret'])).toThrow(
      /--admin-token.*refused/s,
    );
    const plain = load(['--backends', 'http://10.0.0.1:8000', '--redis-url', 'redis://10.0.0.9:6379']);
    expect(plain.kind === 'config' && plain.config.redisUrl).toBe('redis://10.0.0.9:6379');
    const fromEnv = load(['--backends', 'http://10.0.0.1:8000'], {
      KVROUTE_REDIS_URL: 'redis://:s3cret-pw@10.0.0.9:6379',
    });
    expect(fromEnv.kind === 'config' && fromEnv.config.redisUrl).toBe('redis://:s3cret-pw@10.0.0.9:6379');
  });
});
