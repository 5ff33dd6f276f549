import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ConfigError } from './config-error';
import { loadConfig } from './load-config';
import { renderConfigHelp } from './render-config-help';
import { renderConfigMarkdown } from './render-config-markdown';
import { secretOption, urlCarriesSecret, urlWithSecretOffFlags } from './secret-option';

const Config = z.object({
  port: z.number().int().default(8080),
  adminToken: secretOption(z.string().min(16).optional().describe('admin bearer token')),
});

const tempDir = mkdtempSync(join(tmpdir(), 'platform-secret-option-'));
afterAll(() => rmSync(tempDir, { recursive: true, force: true }));

const load = (argv: string[], env: Record<string, string> = {}) =>
  loadConfig({ schema: Config, argv, env, envPrefix: 'APP_' });

/** The ConfigError loading `argv` throws. */
function loadError(argv: string[]): ConfigError {
  try {
    load(argv);
  } catch (caught) {
    if (caught instanceof ConfigError) return caught;
    throw caught;
  }
  throw new Error(`${argv.join(' ')} loaded without an error`);
}

describe('secretOption', () => {
  it('refuses the flag, saying why and what to use instead, without echoing the value', () => {
    for (const argv of [['--admin-token', 'sixteen-chars-secret'], ['--admin-token=sixteen-chars-secret']]) {
      const error = loadError(argv);
      const text = error.message;
      expect(text).toContain('--admin-token');
      expect(text).toMatch(/ps/);
      expect(text).toContain('APP_ADMIN_TOKEN');
      expect(text).not.toContain('sixteen-chars-secret');
      // The value after the refused flag is not reported as a stray argument.
      expect(error.problems).toHaveLength(1);
    }
  });

  it('does not echo the value of a misspelt secret flag either (the schema key typed as a flag)', () => {
    for (const argv of [
      ['--adminToken', 'sixteen-chars-secret'],
      ['--adminToken=sixteen-chars-secret'],
      ['--admin-tokn', 'sixteen-chars-secret'],
    ]) {
      const error = loadError(argv);
      expect(error.message).not.toContain('sixteen-chars-secret');
      expect(error.problems).toHaveLength(1);
    }
  });

  it('is still set from the environment and from a config file', () => {
    const fromEnv = load([], { APP_ADMIN_TOKEN: 'token-from-the-env-0123' });
    expect(fromEnv.kind === 'config' && fromEnv.config.adminToken).toBe('token-from-the-env-0123');
    const file = join(tempDir, 'app.json');
    writeFileSync(file, JSON.stringify({ adminToken: 'token-from-the-file-0123' }));
    const fromFile = load(['--config', file]);
    expect(fromFile.kind === 'config' && fromFile.config.adminToken).toBe('token-from-the-file-0123');
  });

  it('shows no flag in --help or the generated docs', () => {
    const help = renderConfigHelp(Config, { envPrefix: 'APP_' });
    expect(help).not.toContain('--admin-token');
    expect(help).toContain('adminToken <string>');
    expect(help).toContain('env: APP_ADMIN_TOKEN');
    const markdown = renderConfigMarkdown(Config, { title: 'App', envPrefix: 'APP_' });
    expect(markdown).not.toContain('--admin-token');
    expect(markdown).toContain('`APP_ADMIN_TOKEN`');
  });
});

describe('urlWithSecretOffFlags (issue 30)', () => {
  const WithRedis = z.object({ redisUrl: urlWithSecretOffFlags(z.string().optional().describe('Redis URL')) });
  const loadRedis = (argv: string[], env: Record<string, string> = {}) =>
    loadConfig({ schema: WithRedis, argv, env, envPrefix: 'APP_' });

  it('refuses a Redis URL with a password as a flag, without echoing it, and says where to put it', () => {
    for (const argv of [
      ['--redis-url', 'redis://:hunter2pw@10.0.0.9:6379'],
      ['--redis-url=rediss://default:hunter2pw@redis.internal:6380/0'],
      ['--redis-url', 'redis+cluster://:hunter2pw@10.0.0.1:7000,10.0.0.2:7001'],
      ['--redis-url', 'redis://10.0.0.9:6379/?password=hunter2pw'],
    ]) {
      let caught: unknown;
      try {
        loadRedis(argv);
      } catch (error) {
        caught = error;
      }
      expect(caught, argv.join(' ')).toBeInstanceOf(ConfigError);
      const error = caught as ConfigError;
      expect(error.message).toContain('--redis-url');
      expect(error.message).toContain('APP_REDIS_URL');
      expect(error.message).not.toContain('hunter2pw');
      expect(error.problems).toHaveLength(1);
    }
  });

  it('takes a URL without a password as a flag, and any URL from the environment', () => {
    const flagged = loadRedis(['--redis-url', 'redis://user@10.0.0.9:6379']);
    expect(flagged.kind === 'config' && flagged.config.redisUrl).toBe('redis://user@10.0.0.9:6379');
    const fromEnv = loadRedis([], { APP_REDIS_URL: 'redis://:hunter2pw@10.0.0.9:6379' });
    expect(fromEnv.kind === 'config' && fromEnv.config.redisUrl).toBe('redis://:hunter2pw@10.0.0.9:6379');
  });

  it.each([
    ['redis://:pw@h:1', true],
    ['redis://u:pw@h:1', true],
    ['redis://u:@h:1', false],
    ['redis://u@h:1', false],
    ['redis://h:1/0', false],
    ['redis://h:1/0?password=x', true],
    ['redis+cluster://h:1,h:2', false],
  ])('urlCarriesSecret(%s) is %s', (url, carries) => {
    expect(urlCarriesSecret(url)).toBe(carries);
  });
});
