import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ConfigError } from './config-error';
import { loadConfig, type LoadConfigOptions } from './load-config';
import { findLenientObjects } from './lenient-objects';

const SimConfig = z.object({
  port: z.number().int().min(1).max(65535).default(8000).describe('Port the HTTP server listens on.'),
  timeScale: z.number().positive().default(1).describe('Speed-up factor for simulated time.'),
  policy: z.enum(['roundrobin', 'cacheaware']).default('roundrobin'),
  modelName: z.string().default('sim-model'),
  verbose: z.boolean().default(false),
  models: z.array(z.string()).default([]),
  blockSizes: z.array(z.number()).default([16]),
  redis: z.object({ url: z.string(), db: z.number().default(0) }).default({ url: 'redis://localhost:6379', db: 0 }),
});
type SimConfig = z.infer<typeof SimConfig>;

const tempDir = mkdtempSync(join(tmpdir(), 'platform-load-config-'));
afterAll(() => rmSync(tempDir, { recursive: true, force: true }));

function writeTemp(name: string, text: string): string {
  const path = join(tempDir, name);
  writeFileSync(path, text);
  return path;
}

function load(options: Partial<LoadConfigOptions<typeof SimConfig>> = {}): SimConfig {
  const result = loadConfig({ schema: SimConfig, argv: [], env: {}, envPrefix: 'KVROUTE_SIM_', ...options });
  if (result.kind !== 'config') throw new Error('expected a config result');
  return result.config;
}

function loadError(options: Partial<LoadConfigOptions<typeof SimConfig>>): ConfigError {
  try {
    load(options);
  } catch (error) {
    if (error instanceof ConfigError) return error;
    throw error;
  }
  throw new Error('expected loadConfig to throw');
}

describe('loadConfig precedence', () => {
  const yamlPath = writeTemp('sim.yaml', 'port: 9000\ntimeScale: 2\npolicy: cacheaware\nmodelName: from-file\n');
  const jsonPath = writeTemp(
    'sim.json',
    JSON.stringify({ port: 9100, timeScale: 3, redis: { url: 'redis://file:6379' } }),
  );

  it('uses schema defaults when nothing else is set', () => {
    expect(load()).toEqual({
      port: 8000,
      timeScale: 1,
      policy: 'roundrobin',
      modelName: 'sim-model',
      verbose: false,
      models: [],
      blockSizes: [16],
      redis: { url: 'redis://localhost:6379', db: 0 },
    });
  });

  it('lets a YAML file named by --config override defaults', () => {
    const config = load({ argv: ['--config', yamlPath] });
    expect(config).toMatchObject({
      port: 9000,
      timeScale: 2,
      policy: 'cacheaware',
      modelName: 'from-file',
      verbose: false,
    });
  });

  it('reads a JSON file named by the <PREFIX>CONFIG env var, nested sections included', () => {
    const config = load({ env: { KVROUTE_SIM_CONFIG: jsonPath } });
    expect(config).toMatchObject({ port: 9100, timeScale: 3, redis: { url: 'redis://file:6379', db: 0 } });
  });

  it('lets env override the file and flags override env', () => {
    const config = load({
      argv: ['--config', yamlPath, '--port', '9300'],
      env: { KVROUTE_SIM_PORT: '9200', KVROUTE_SIM_TIME_SCALE: '4' },
    });
    expect(config).toMatchObject({ port: 9300, timeScale: 4, policy: 'cacheaware', modelName: 'from-file' });
  });

  it('prefers the --config flag over the config env var', () => {
    const config = load({ argv: [`--config=${yamlPath}`], env: { KVROUTE_SIM_CONFIG: jsonPath } });
    expect(config.port).toBe(9000);
  });

  it('treats empty env strings as unset', () => {
    const config = load({ argv: ['--config', yamlPath], env: { KVROUTE_SIM_PORT: '', KVROUTE_SIM_MODEL_NAME: '' } });
    expect(config).toMatchObject({ port: 9000, modelName: 'from-file' });
  });

  it('uses an envMap entry instead of the derived env name', () => {
    const config = load({
      envMap: { modelName: 'MODEL' },
      env: { MODEL: 'mapped', KVROUTE_SIM_MODEL_NAME: 'derived' },
    });
    expect(config.modelName).toBe('mapped');
  });

  it('treats an empty config file as no values', () => {
    expect(load({ argv: ['--config', writeTemp('empty.yaml', '')] }).port).toBe(8000);
  });
});

describe('loadConfig coercion', () => {
  it('coerces env strings to numbers, booleans, enums and comma-separated lists', () => {
    const config = load({
      env: {
        KVROUTE_SIM_PORT: '8080',
        KVROUTE_SIM_TIME_SCALE: '0.5',
        KVROUTE_SIM_VERBOSE: 'yes',
        KVROUTE_SIM_POLICY: 'cacheaware',
        KVROUTE_SIM_MODELS: 'llama-3-8b, qwen-2 ,',
        KVROUTE_SIM_BLOCK_SIZES: '16,32',
      },
    });
    expect(config).toMatchObject({
      port: 8080,
      timeScale: 0.5,
      verbose: true,
      policy: 'cacheaware',
      models: ['llama-3-8b', 'qwen-2'],
      blockSizes: [16, 32],
    });
  });

  it('accepts --key=value, --flag and --no-flag, and negative numbers as separate values', () => {
    const schema = z.object({
      offsetMs: z.number(),
      verbose: z.boolean().default(true),
      dryRun: z.boolean().default(false),
    });
    const result = loadConfig({ schema, argv: ['--offset-ms', '-5', '--no-verbose', '--dry-run'], env: {} });
    expect(result).toEqual({
      kind: 'config',
      config: { offsetMs: -5, verbose: false, dryRun: true },
      ignoredFileKeys: [],
      unknownEnv: [],
    });
  });

  it('accepts explicit boolean values with =', () => {
    expect(load({ argv: ['--verbose=false'], env: { KVROUTE_SIM_VERBOSE: 'true' } }).verbose).toBe(false);
  });

  it('joins repeated array flags into one list', () => {
    expect(load({ argv: ['--models', 'a,b', '--models=c'] }).models).toEqual(['a', 'b', 'c']);
  });
});

describe('loadConfig errors', () => {
  it('names the field, the env var and the bad value when an enum is wrong', () => {
    const error = loadError({ env: { KVROUTE_SIM_POLICY: 'fastest' } });
    expect(error.message).toBe('KVROUTE_SIM_POLICY: "fastest" is not one of roundrobin, cacheaware');
    expect(error.problems).toEqual([
      expect.objectContaining({ path: 'policy', source: { kind: 'env', name: 'KVROUTE_SIM_POLICY', raw: 'fastest' } }),
    ]);
  });

  it('reports every bad field with its own source', () => {
    const filePath = writeTemp('bad.yaml', 'redis:\n  url: 42\n');
    const error = loadError({
      argv: ['--config', filePath, '--port', 'eighty'],
      env: { KVROUTE_SIM_TIME_SCALE: '-1' },
    });
    expect(error.problems.map((problem) => problem.path).sort()).toEqual(['port', 'redis.url', 'timeScale']);
    // One line each, starting with what the user typed: the flag, the env var, the key in its file.
    expect(error.message.split('\n').sort()).toEqual([
      '--port: "eighty" is not a number; expected a port number, 0 to 65535',
      'KVROUTE_SIM_TIME_SCALE: -1 is too small; expected more than 0',
      `redis.url in ${filePath}: 42 is not a string`,
    ]);
  });

  it('says how to set a required field that nothing set', () => {
    const schema = z.object({ redisUrl: z.string() });
    expect(() => loadConfig({ schema, argv: [], env: {}, envPrefix: 'KVROUTE_' })).toThrow(
      /^redisUrl: is required → set --redis-url, KVROUTE_REDIS_URL or "redisUrl" in the config file$/,
    );
  });

  it('rejects an unknown flag by name and suggests the spelling it resembles', () => {
    expect(() => load({ argv: ['--bogus', '1'] })).toThrow(/--bogus: unknown flag/);
    expect(() => load({ argv: ['--timeScale', '2'] })).toThrow(
      /--timeScale: unknown flag \(did you mean --time-scale\?\)/,
    );
  });

  it('rejects a value flag with no value and a stray positional argument', () => {
    const error = loadError({ argv: ['stray', '--port'] });
    expect(error.problems).toEqual([
      expect.objectContaining({ path: 'stray' }),
      { path: '--port', message: 'expects a value' },
    ]);
  });

  it('rejects nested objects from flags, since they are config-file only', () => {
    expect(() => load({ argv: ['--redis', 'x'] })).toThrow(/--redis: unknown flag/);
  });

  it('rejects unknown keys in the config file', () => {
    const filePath = writeTemp('typo.yaml', 'time_scale: 2\n');
    expect(() => load({ argv: ['--config', filePath] })).toThrow(
      `time_scale in ${filePath}: unknown key "time_scale" (did you mean "timeScale"?)`,
    );
  });

  it('keeps unknown file keys when the schema is a looseObject', () => {
    const filePath = writeTemp('extra.yaml', 'port: 1\nextra: true\n');
    const schema = z.looseObject({ port: z.number() });
    expect(loadConfig({ schema, argv: ['--config', filePath], env: {} })).toEqual({
      kind: 'config',
      config: { port: 1, extra: true },
      ignoredFileKeys: [],
      unknownEnv: [],
    });
  });

  it('reads a shared file: common keys, its own section over them, other apps’ keys and sections ignored, typos still caught', () => {
    // `intervalMs` belongs to another app; `policy` is common; `port` differs per app.
    const filePath = writeTemp(
      'kvroute.yaml',
      'port: 1\nintervalMs: 500\npolicy: cacheaware\nmodelName: m\nsim:\n  port: 2\nrouter:\n  port: 3\n',
    );
    const shared = { section: 'sim', otherSections: ['router', 'poller'], otherAppKeys: ['intervalMs'] };
    expect(load({ argv: ['--config', filePath], sharedFile: shared })).toMatchObject({
      port: 2,
      policy: 'cacheaware',
      modelName: 'm',
    });
    const typo = writeTemp('typo-shared.yaml', 'time_scale: 2\nintervalMs: 500\n');
    expect(() => load({ argv: ['--config', typo], sharedFile: shared })).toThrow(
      /^time_scale in .*: unknown key "time_scale" \(did you mean "timeScale"\?\)$/,
    );
    // A key no app knows is refused even when it resembles none (before issue 31 it was left to "other apps").
    const unknown = writeTemp('unknown-shared.yaml', 'colour: blue\nintervalMs: 500\n');
    expect(() => load({ argv: ['--config', unknown], sharedFile: shared })).toThrow(
      /^colour in .*: unknown key "colour"$/,
    );
    const badSection = writeTemp('bad-section.yaml', 'sim: 3\n');
    expect(() => load({ argv: ['--config', badSection], sharedFile: shared })).toThrow(/^sim in .*: must be a mapping/);
  });

  it('reports an unreadable or malformed file', () => {
    expect(() => load({ argv: ['--config', join(tempDir, 'missing.yaml')] })).toThrow(/cannot read config file/);
    expect(() => load({ argv: ['--config', writeTemp('broken.json', '{"port":')] })).toThrow(
      /cannot parse config file/,
    );
    expect(() => load({ argv: ['--config', writeTemp('list.yaml', '- 1\n- 2\n')] })).toThrow(/must contain a mapping/);
  });
});

describe('loadConfig --help', () => {
  it('returns help text instead of a config, even next to otherwise bad flags', () => {
    const result = loadConfig({
      schema: SimConfig,
      argv: ['--bogus', '-h'],
      env: {},
      envPrefix: 'KVROUTE_SIM_',
      usage: 'Usage: vllm-sim [options]',
    });
    expect(result.kind).toBe('help');
    if (result.kind !== 'help') return;
    expect(result.text.startsWith('Usage: vllm-sim [options]')).toBe(true);
    expect(result.text).toContain('--time-scale <number>');
  });
});

describe('findLenientObjects', () => {
  it('finds nested z.object mappings, which drop unknown keys, through lists, optionals and unions', () => {
    const schema = z.object({
      strict: z.strictObject({ inner: z.object({ a: z.number() }).optional() }),
      list: z.array(z.union([z.string(), z.object({ url: z.string() })])).default([]),
      loose: z.looseObject({ b: z.number() }),
    });
    expect(findLenientObjects(schema)).toEqual(['strict.inner', 'list[]']);
  });
});

describe('readable validation messages (issue 31)', () => {
  const schema = z.object({
    backends: z.array(z.union([z.url({ protocol: /^https?$/ }), z.strictObject({ url: z.url(), weight: z.number() })])),
    retryMs: z.coerce.number().int().min(0).default(0),
  });
  const problems = (argv: string[]): string[] => {
    try {
      loadConfig({ schema, argv, env: {}, envPrefix: 'KVROUTE_' });
    } catch (error) {
      return (error as ConfigError).message.replaceAll(tempDir, 'DIR').split('\n');
    }
    return [];
  };

  it('reports the union member whose type the value had, or else the types it could have had', () => {
    expect(problems(['--backends', '127.0.0.1:8001'])).toEqual([
      '--backends: "127.0.0.1:8001" is not a URL; expected http://host:port',
    ]);
    const file = writeTemp('union.yaml', 'backends:\n  - 42\n  - url: http://a:1\n    wieght: 2\n');
    expect(problems(['--config', file])).toEqual([
      'backends.0 in DIR/union.yaml: 42 is not a string or a mapping',
      'backends.1 in DIR/union.yaml: weight is required; unknown key "wieght" (did you mean "weight"?)',
    ]);
  });

  it('quotes what the user typed, not what coercion made of it, with the unit a duration needs', () => {
    expect(problems(['--backends', 'http://a:1', '--retry-ms', '2s'])).toEqual([
      '--retry-ms: "2s" is not a number; expected a number of milliseconds, e.g. 5000',
    ]);
    expect(problems(['--backends', 'http://a:1', '--retry-ms', '1.5'])).toEqual([
      '--retry-ms: 1.5 is not an integer; expected a number of milliseconds, e.g. 5000',
    ]);
  });
});
