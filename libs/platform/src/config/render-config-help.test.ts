import { describe, expect, it } from 'vitest';
import { z } from 'zod';
import { renderConfigHelp } from './render-config-help';

const RouterConfig = z.object({
  port: z.number().int().default(8080).describe('Port the router listens on.'),
  policy: z.enum(['roundrobin', 'cacheaware']).default('cacheaware').describe('Routing policy.'),
  redisUrl: z.string().describe('Redis connection URL.'),
  debugDecisions: z.boolean().default(false),
  models: z.array(z.enum(['a', 'b'])).optional(),
  upstream: z.object({ connectTimeoutMs: z.number() }).describe('Upstream pool settings.'),
});

describe('renderConfigHelp', () => {
  const text = renderConfigHelp(RouterConfig, {
    envPrefix: 'KVROUTE_',
    envMap: { redisUrl: 'REDIS_URL' },
    usage: 'Usage: router [options]',
  });

  it('lists every option with its flag, env var, type, default and description', () => {
    expect(text).toContain(
      '--port <number>\n      Port the router listens on.\n      key: port   env: KVROUTE_PORT   default: 8080',
    );
    expect(text).toContain(
      '--policy <roundrobin|cacheaware>\n      Routing policy.\n      key: policy   env: KVROUTE_POLICY   default: cacheaware',
    );
    expect(text).toContain(
      '--redis-url <string>\n      Redis connection URL.\n      key: redisUrl   env: REDIS_URL   required',
    );
    expect(text).toContain(
      '--[no-]debug-decisions\n      key: debugDecisions   env: KVROUTE_DEBUG_DECISIONS   default: false',
    );
    expect(text).toContain('--models <a|b,...>\n      key: models   env: KVROUTE_MODELS   optional');
  });

  it('lists nested objects as config-file only, without flag or env', () => {
    expect(text).toContain(
      'Config file only (nested sections):\n  upstream <object>\n      Upstream pool settings.\n      key: upstream   required',
    );
    expect(text).not.toContain('KVROUTE_UPSTREAM');
  });

  it('documents the config file flag, help and precedence', () => {
    expect(text.startsWith('Usage: router [options]\n')).toBe(true);
    expect(text).toContain('--config <file>');
    expect(text).toContain('env: KVROUTE_CONFIG');
    expect(text).toContain('-h, --help');
    expect(text).toContain('defaults < config file < env vars < flags');
  });

  it('mentions every schema key', () => {
    for (const key of Object.keys(RouterConfig.shape)) expect(text).toContain(`key: ${key}`);
  });

  it('refuses a schema key that would shadow a reserved flag', () => {
    expect(() => renderConfigHelp(z.object({ help: z.boolean() }))).toThrow(/reserved flag --help/);
  });
});
