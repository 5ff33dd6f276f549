import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { ConfigError } from './config-error';
import { loadConfig } from './load-config';
import { renderConfigHelp } from './render-config-help';
import { renderConfigMarkdown } from './render-config-markdown';
import { secretOption } from './secret-option';

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
