import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { PD_ROUTER, PD_SIMS, POLLERS, ROUTERS, SIMS, VLLMS, backendList } from './compose-stack';
import { ENV_EXAMPLE_FILE, REPO_ROOT, composeVariables, readRepoFile, repoPath, type ComposeFile } from './stack-files';

/**
 * docker-compose.yml as Compose itself resolves it (system test: needs the docker CLI's `compose`
 * plugin or a standalone `docker-compose`; `npm run test:system` installs Debian's docker-compose).
 * `config` only parses and resolves the file: no Docker engine is needed.
 */
function findCompose(): { command: string[]; version: string } | { missing: string } {
  for (const command of [['docker', 'compose'], ['docker-compose']]) {
    const result = spawnSync(command[0] as string, [...command.slice(1), 'version'], {
      encoding: 'utf8',
      timeout: 15_000,
    });
    if (result.error === undefined && result.status === 0)
      return { command, version: result.stdout.trim().split('\n')[0] ?? '' };
  }
  return {
    missing: 'neither `docker compose` nor `docker-compose` works (npm run test:system installs docker-compose)',
  };
}
const composeTool = findCompose();

/** The one variable without a default: the stack's Redis password (the README's setup appends it to .env). */
const REDIS_PASSWORD = 'f00dfeed0123456789abcdef';

/**
 * `compose [--profile P] config` in the repository, with none of the file's variables set (their
 * defaults apply) but `set` (REDIS_PASSWORD unless told otherwise), and `.env.example` as the env file:
 * the `.env` the README's setup copies from it, whatever a developer's own untracked `.env` holds.
 */
function composeConfig(
  profiles: readonly string[],
  set: Readonly<Record<string, string>> = { REDIS_PASSWORD },
): { status: number | null; stdout: string; stderr: string } {
  if (!('command' in composeTool)) throw new Error(composeTool.missing);
  const env: Record<string, string | undefined> = { ...process.env };
  for (const name of composeVariables(readRepoFile('docker-compose.yml'))) delete env[name];
  Object.assign(env, set);
  delete env['COMPOSE_PROFILES'];
  delete env['COMPOSE_FILE'];
  const [command, ...prefix] = composeTool.command;
  const args = [
    ...prefix,
    '--env-file',
    repoPath(ENV_EXAMPLE_FILE),
    '-f',
    repoPath('docker-compose.yml'),
    ...profiles.flatMap((profile) => ['--profile', profile]),
    'config',
  ];
  const result = spawnSync(command as string, args, { cwd: REPO_ROOT, env, encoding: 'utf8', timeout: 60_000 });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

describe(`docker compose config with ${'command' in composeTool ? `${composeTool.command.join(' ')} (${composeTool.version})` : 'no Compose'}`, () => {
  const isV1 = 'command' in composeTool && /version 1\./.test(composeTool.version);

  for (const [label, profiles, backends, absent] of [
    ['default profiles (.env.example: sim)', [], SIMS, VLLMS],
    ['--profile gpu', ['gpu'], VLLMS, SIMS],
  ] as const) {
    it(`accepts the file with ${label}`, () => {
      const result = composeConfig(profiles);
      expect(result.status, result.stderr).toBe(0);
      expect(result.stderr).not.toMatch(/error|invalid/i);
      const resolved = parseYaml(result.stdout) as ComposeFile;
      const names = Object.keys(resolved.services);
      expect(names).toEqual(
        expect.arrayContaining([...ROUTERS, ...POLLERS, ...backends, 'redis', 'haproxy', 'prometheus', 'grafana']),
      );
      // Compose 1.x prints every service whatever the profiles; 2.x only the active ones.
      if (!isV1) for (const name of absent) expect(names).not.toContain(name);
      for (const router of ROUTERS) {
        expect(resolved.services[router]?.environment?.['KVROUTE_BACKENDS']).toBe(backendList('8000'));
        expect(resolved.services[router]?.environment?.['KVROUTE_REDIS_URL']).toBe(
          `redis://:${REDIS_PASSWORD}@redis:6379`,
        );
      }
      expect(resolved.services['redis']?.environment?.['REDISCLI_AUTH']).toBe(REDIS_PASSWORD);
    }, 60_000);
  }

  it('accepts the file with --profile pd: the prefill/decode sims and their router come up beside the fleet', () => {
    const result = composeConfig(['pd']);
    expect(result.status, result.stderr).toBe(0);
    expect(result.stderr).not.toMatch(/error|invalid/i);
    const resolved = parseYaml(result.stdout) as ComposeFile;
    const names = Object.keys(resolved.services);
    expect(names).toEqual(expect.arrayContaining([...PD_SIMS, PD_ROUTER, ...ROUTERS, ...POLLERS, 'redis']));
    expect(resolved.services[PD_ROUTER]?.environment?.['KVROUTE_PREFILL_BACKENDS']).toBe(
      'http://prefill-1:8000,http://prefill-2:8000',
    );
    expect(resolved.services[PD_ROUTER]?.environment?.['KVROUTE_DECODE_BACKENDS']).toBe(
      'http://decode-1:8000,http://decode-2:8000',
    );
  });

  it('refuses to start without a Redis password, and says how to set one', () => {
    const result = composeConfig([], {});
    expect(result.status).not.toBe(0);
    expect(result.stderr).toContain('set REDIS_PASSWORD');
  }, 60_000);
});
