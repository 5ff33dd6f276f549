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
