import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '@kvroute/platform';
import { describe, expect, it } from 'vitest';
import { configuredBackends, mergeBackendLists } from './backend-list';
import { POLLER_CONFIG_FILE, POLLER_ENV_PREFIX, PollerConfig } from './config';

function load(argv: string[], env: Record<string, string> = {}) {
  const loaded = loadConfig({ schema: PollerConfig, argv, env, envPrefix: POLLER_ENV_PREFIX });
  if (loaded.kind !== 'config') throw new Error('help');
  return loaded.config;
}

/** The kvroute.yaml of the README: read by the routers and the pollers alike. */
const SHARED_KVROUTE_YAML =
  "# One file for the fleet: common keys at the top, each app's own in its section.\nbackends:\n " +
  ' - http://10.0.0.1:8000\n  - http://10.0.0.2:8000\nredisUrl: redis://127.0.0.1:6379\npolicy: ' +
  'cacheaware\nmaxBlocksPerPool: 500000\nrouter:\n  port: 8080\npoller:\n  port: 9464\n  intervalMs: ' +
  '2000\n';

describe('PollerConfig', () => {
  it('reads the fleet’s shared kvroute.yaml: common keys, its own section, the routers’ keys left alone', () => {
    const dir = mkdtempSync(join(tmpdir(), 'poller-config-'));
    try {
      const file = join(dir, 'kvroute.yaml');
      writeFileSync(file, SHARED_KVROUTE_YAML);
      const loaded = loadConfig({
        schema: PollerConfig,
        argv: ['--config', file],
        env: {},
        envPrefix: POLLER_ENV_PREFIX,
        sharedFile: POLLER_CONFIG_FILE,
      });
      if (loaded.kind !== 'config') throw new Error('help');
      expect(loaded.config).toMatchObject({ port: 9464, intervalMs: 2000, redisUrl: 'redis://127.0.0.1:6379' });
      expect(configuredBackends(loaded.config.backends).map((backend) => backend.id)).toEqual([
        '10.0.0.1:8000',
        '10.0.0.2:8000',
      ]);
      // maxBlocksPerPool is the routers' and the KV-event indexer's alike (the owner index's cap).
      expect(loaded.ignoredFileKeys).toEqual(['policy']);
      expect(loaded.config.maxBlocksPerPool).toBe(500_000);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('reads the command line of the README', () => {
    const config = load([
      '--redis-url',
      'redis://127.0.0.1:6379',
      '--backends',
      'http://10.0.0.1:8000,http://10.0.0.2:8000',
      '--interval-ms',
      '1000',
      '--port',
      '9464',
    ]);
    expect(config).toMatchObject({
      redisUrl: 'redis://127.0.0.1:6379',
      intervalMs: 1000,
      port: 9464,
      failuresToUnhealthy: 2,
      successesToHealthy: 2,
    });
    expect(configuredBackends(config.backends)).toEqual([
      { id: '10.0.0.1:8000', url: 'http://10.0.0.1:8000', engine: null },
      { id: '10.0.0.2:8000', url: 'http://10.0.0.2:8000', engine: null },
    ]);
  });

  it('takes env under KVROUTE_POLLER_ and accepts no configured backend (the shared set may have them)', () => {
    expect(
      load([], {
        KVROUTE_POLLER_REDIS_URL: 'redis://r:6379',
        KVROUTE_POLLER_INTERVAL_MS: '250',
        KVROUTE_POLLER_SCRAPE_TIMEOUT_MS: '100',
      }),
    ).toMatchObject({
      redisUrl: 'redis://r:6379',
      intervalMs: 250,
      backends: [],
    });
  });

  it('refuses a scrape timeout that does not end before the next interval, and a job lock too short for a scrape', () => {
    expect(
      PollerConfig.safeParse({ redisUrl: 'redis://r', intervalMs: 500, scrapeTimeoutMs: 500 }).error?.issues[0]?.path,
    ).toEqual(['scrapeTimeoutMs']);
    expect(
      PollerConfig.safeParse({ redisUrl: 'redis://r', scrapeTimeoutMs: 400, jobLockMs: 1500 }).error?.issues[0]?.path,
    ).toEqual(['jobLockMs']);
  });

  it('accepts a router backend list from a file (weight ignored, models kept for KV events) and refuses duplicate ids', () => {
    const config = PollerConfig.parse({
      redisUrl: 'redis://r',
      backends: [{ url: 'http://a:1', id: 'gpu-0', models: ['m'], weight: 2, engine: 'sglang' }, 'http://b:2'],
    });
    expect(configuredBackends(config.backends)).toEqual([
      { id: 'gpu-0', url: 'http://a:1', engine: 'sglang', models: ['m'], kvEvents: undefined },
      { id: 'b:2', url: 'http://b:2', engine: null, models: undefined, kvEvents: undefined },
    ]);
    expect(() =>
      configuredBackends(
        PollerConfig.parse({ redisUrl: 'redis://r', backends: ['http://a:1', { url: 'http://a:1/v1' }] }).backends,
      ),
    ).toThrow(/duplicate backend id "a:1"/);
  });
});

describe('mergeBackendLists', () => {
  it("adds the shared set's backends to the configured ones; the shared URL wins, the configured engine stays", () => {
    const configured = [
      { id: 'b', url: 'http://old:1', engine: 'vllm' as const },
      { id: 'c', url: 'http://c:1', engine: null },
    ];
    const shared = [
      { id: 'b', url: 'http://new:1', weight: 1, drained: false, updatedAtMs: 0 },
      { id: 'a', url: 'http://a:1', weight: 1, drained: true, updatedAtMs: 0 },
    ];
    expect(mergeBackendLists(configured, shared)).toEqual([
      { id: 'a', url: 'http://a:1', engine: null },
      { id: 'b', url: 'http://new:1', engine: 'vllm' },
      { id: 'c', url: 'http://c:1', engine: null },
    ]);
  });

  it("takes a backend's KV-event endpoints from the shared set unless the poller's own config names them", () => {
    const fromSet = { endpoint: 'tcp://a:5557', model: 'm' };
    const configured = [{ id: 'b', url: 'http://b:1', engine: null, kvEvents: { endpoint: 'tcp://b:6000' } }];
    const shared = [
      { id: 'a', url: 'http://a:1', weight: 1, drained: false, updatedAtMs: 0, kvEvents: fromSet },
      { id: 'b', url: 'http://b:1', weight: 1, drained: false, updatedAtMs: 0, kvEvents: fromSet },
    ];
    const merged = mergeBackendLists(configured, shared);
    expect(merged.find((backend) => backend.id === 'a')?.kvEvents).toEqual(fromSet);
    expect(merged.find((backend) => backend.id === 'b')?.kvEvents).toEqual({ endpoint: 'tcp://b:6000' });
  });
});
