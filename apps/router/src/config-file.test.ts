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
      // The poller's key: logged at start, not an error.
      expect(loaded.ignoredFileKeys).toEqual(['failuresToUnhealthy']);
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
      ).toThrow(/redis_url in .*: unknown key "redis_url" \(did you mean "redisUrl"\?\)/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('strict config (issue 31)', () => {
  const loadFile = (text: string, argv: string[] = []) => {
    const dir = mkdtempSync(join(tmpdir(), 'router-config-'));
    try {
      const file = join(dir, 'kvroute.yaml');
      writeFileSync(file, text);
      return loadConfig({
        schema: RouterConfig,
        argv: ['--config', file, ...argv],
        env: {},
        envPrefix: ROUTER_ENV_PREFIX,
        sharedFile: ROUTER_CONFIG_FILE,
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  };
  const problemsOf = (run: () => unknown): string[] => {
    try {
      run();
    } catch (error) {
      return (error as Error).message.split('\n').map((line) => line.replace(/ in \/\S+kvroute\.yaml/, ' in FILE'));
    }
    return [];
  };

  it('refuses a top-level key no kvroute app knows, naming the nearest, as it refuses one under router:', () => {
    expect(problemsOf(() => loadFile('backends: [http://10.0.0.1:8000]\npolcy: roundrobin\n'))).toEqual([
      'polcy in FILE: unknown key "polcy" (did you mean "policy"?)',
    ]);
    expect(problemsOf(() => loadFile('backends: [http://10.0.0.1:8000]\nrouter:\n  polcy: roundrobin\n'))).toEqual([
      'router.polcy in FILE: unknown key "polcy" (did you mean "policy"?)',
    ]);
  });

  it('refuses unknown keys in nested mappings too, and lists every problem of the file at once', () => {
    const text = [
      'backends:',
      '  - url: http://10.0.0.1:8000',
      '    wieght: 2',
      '  - url: http://10.0.0.2:8000',
      '    dataParallel: { size: 2, strtRank: 1 }',
      'colour: blue',
      '',
    ].join('\n');
    expect(problemsOf(() => loadFile(text))).toEqual([
      'colour in FILE: unknown key "colour"',
      'backends.0 in FILE: unknown key "wieght" (did you mean "weight"?)',
      'backends.1.dataParallel in FILE: unknown key "strtRank" (did you mean "startRank"?)',
    ]);
  });

  it('says what was expected, one line per mistake, naming the flag', () => {
    const load = (argv: string[]) => () =>
      loadConfig({ schema: RouterConfig, argv, env: {}, envPrefix: ROUTER_ENV_PREFIX });
    expect(problemsOf(load(['--backends', '127.0.0.1:8001']))).toEqual([
      '--backends: "127.0.0.1:8001" is not a URL; expected http://host:port',
    ]);
    expect(
      problemsOf(
        load([
          '--backends',
          'http://127.0.0.1:8001',
          '--port',
          '80x',
          '--policy',
          'roundrobn',
          '--lease-ttl-ms',
          '5s',
          '--block-size-bytes',
          '4',
          '--learn-from-responses=maybe',
        ]),
      ),
    ).toEqual([
      '--port: "80x" is not a number; expected a port number, 0 to 65535',
      '--policy: "roundrobn" is not one of cacheaware, prefixaware, kvrouter, kvaware, chwbl, session, ' +
        'leastloaded, roundrobin, random (did you mean "roundrobin"?)',
      '--block-size-bytes: 4 is too small; expected at least 8',
      '--learn-from-responses: "maybe" is not true or false',
      '--lease-ttl-ms: "5s" is not a number; expected a number of milliseconds, e.g. 5000',
    ]);
  });

  it('never quotes a secret, and masks the password of a URL it quotes', () => {
    const fromEnv = (env: Record<string, string>) => () =>
      loadConfig({
        schema: RouterConfig,
        argv: [],
        env: { KVROUTE_BACKENDS: 'http://a:1', ...env },
        envPrefix: ROUTER_ENV_PREFIX,
      });
    const [line] = problemsOf(fromEnv({ KVROUTE_ADMIN_TOKEN: 'short-pw' }));
    expect(line).toMatch(/^KVROUTE_ADMIN_TOKEN: /);
    expect(line).not.toContain('short-pw');
    expect(problemsOf(fromEnv({ KVROUTE_BACKENDS: 'http://user:hunter2@10.0.0.1:8000,10.0.0.2' }))).toEqual([
      'KVROUTE_BACKENDS: "10.0.0.2" is not a URL; expected http://host:port',
    ]);
    expect(problemsOf(fromEnv({ KVROUTE_BACKENDS: 'ftp://user:hunter2@10.0.0.1:8000' }))).toEqual([
      'KVROUTE_BACKENDS: "ftp://***@10.0.0.1:8000" is not a URL; expected http://host:port',
    ]);
  });

  it('warns of KVROUTE_ variables no option reads, naming the nearest, and leaves other apps’ alone', () => {
    const loaded = loadConfig({
      schema: RouterConfig,
      argv: ['--backends', 'http://a:1'],
      env: {
        KVROUTE_POLCY: 'roundrobin',
        KVROUTE_POLLER_INTERVAL_MS: '500',
        KVROUTE_COMMIT: 'abc',
        KVROUTE_NOTHING_LIKE_IT: '1',
      },
      envPrefix: ROUTER_ENV_PREFIX,
    });
    expect(loaded.kind === 'config' && loaded.unknownEnv).toEqual([
      { name: 'KVROUTE_NOTHING_LIKE_IT' },
      { name: 'KVROUTE_POLCY', didYouMean: 'KVROUTE_POLICY' },
    ]);
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
