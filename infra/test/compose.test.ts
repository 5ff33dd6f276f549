import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { unknownEnvVars } from './config-keys';
import {
  REPO_ROOT,
  aliasesOf,
  bindMounts,
  commandWorks,
  composeVariables,
  flagValue,
  interpolateDefaults,
  kvrouteApp,
  readCompose,
  readDotEnv,
  readRepoFile,
  repoPath,
  serviceEnv,
  servicesOf,
  type ComposeFile,
  type ComposeService,
} from './stack-files';

const compose = readCompose();
const services = compose.services;
const ROUTERS = ['router-1', 'router-2', 'router-3'];
const POLLERS = ['poller-1', 'poller-2'];
const SIMS = ['sim-1', 'sim-2', 'sim-3', 'sim-4'];
const VLLMS = ['vllm-1', 'vllm-2', 'vllm-3', 'vllm-4'];
const BACKEND_ALIASES = ['backend-1', 'backend-2', 'backend-3', 'backend-4'];
/** The backend list routers and pollers get: every backend-N alias on `port`. */
const backendList = (port: string): string => BACKEND_ALIASES.map((alias) => `http://${alias}:${port}`).join(',');

/**
 * The Compose implementation on this machine: the docker CLI's `compose` plugin, else a standalone
 * `docker-compose` (v2, or Debian's 1.29). The docker CLI without either fails the test rather than
 * skipping it (`.ci/run` installs Debian's docker-compose).
 */
function findCompose(): { command: string[]; version: string } | { missing: string } {
  for (const command of [['docker', 'compose'], ['docker-compose']]) {
    const result = spawnSync(command[0] as string, [...command.slice(1), 'version'], { encoding: 'utf8', timeout: 15_000 });
    if (result.error === undefined && result.status === 0) return { command, version: result.stdout.trim().split('\n')[0] ?? '' };
  }
  return commandWorks('docker', ['--version']) ? { missing: 'the docker CLI is here but neither `docker compose` nor `docker-compose` works' } : { missing: 'no docker CLI on this machine' };
}
const composeTool = findCompose();
const dockerCliAbsent = 'missing' in composeTool && composeTool.missing.startsWith('no docker CLI');

/** `compose [--profile P] config` in the repository, with none of the file's variables set (their defaults apply). */
function composeConfig(profiles: readonly string[]): { status: number | null; stdout: string; stderr: string } {
  if (!('command' in composeTool)) throw new Error(composeTool.missing);
  const env = { ...process.env };
  for (const name of composeVariables(readRepoFile('docker-compose.yml'))) delete env[name];
  delete env['COMPOSE_PROFILES'];
  delete env['COMPOSE_FILE'];
  const [command, ...prefix] = composeTool.command;
  const args = [...prefix, '-f', repoPath('docker-compose.yml'), ...profiles.flatMap((profile) => ['--profile', profile]), 'config'];
  const result = spawnSync(command as string, args, { cwd: REPO_ROOT, env, encoding: 'utf8', timeout: 60_000 });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

describe('docker compose config', () => {
  if ('missing' in composeTool && dockerCliAbsent) it.skip(`not run: ${composeTool.missing}`, () => {});

  describe.skipIf(dockerCliAbsent)(`with ${'command' in composeTool ? `${composeTool.command.join(' ')} (${composeTool.version})` : 'no Compose'}`, () => {
    const isV1 = 'command' in composeTool && /version 1\./.test(composeTool.version);

    for (const [label, profiles, backends, absent] of [
      ['default profiles (.env: sim)', [], SIMS, VLLMS],
      ['--profile gpu', ['gpu'], VLLMS, SIMS],
    ] as const) {
      it(`accepts the file with ${label}`, () => {
        const result = composeConfig(profiles);
        expect(result.status, result.stderr).toBe(0);
        expect(result.stderr).not.toMatch(/error|invalid/i);
        const resolved = parseYaml(result.stdout) as ComposeFile;
        const names = Object.keys(resolved.services);
        expect(names).toEqual(expect.arrayContaining([...ROUTERS, ...POLLERS, ...backends, 'redis', 'haproxy', 'prometheus', 'grafana']));
        // Compose 1.x prints every service whatever the profiles; 2.x only the active ones.
        if (!isV1) for (const name of absent) expect(names).not.toContain(name);
        for (const router of ROUTERS) {
          expect(resolved.services[router]?.environment?.['KVROUTE_BACKENDS']).toBe(backendList('8000'));
        }
      }, 60_000);
    }
  });
});

describe('docker-compose.yml', () => {
  it('has the stack: 3 routers, 2 pollers, 4 sims, 4 vLLM (gpu), redis, haproxy, prometheus, grafana, bench', () => {
    expect(Object.keys(services).sort()).toEqual([...ROUTERS, ...POLLERS, ...SIMS, ...VLLMS, 'redis', 'haproxy', 'prometheus', 'grafana', 'bench'].sort());
    expect(servicesOf(compose, 'router').map(([name]) => name)).toEqual(ROUTERS);
    expect(servicesOf(compose, 'poller').map(([name]) => name)).toEqual(POLLERS);
    expect(servicesOf(compose, 'sim').map(([name]) => name)).toEqual(SIMS);
  });

  it('sets only env vars the apps read on router, poller and sim services', () => {
    const problems = Object.entries(services).flatMap(([name, service]) => {
      const app = kvrouteApp(service);
      if (app === null) return [];
      const names = Object.keys(service.environment ?? {});
      expect(names.length, `${name} sets no KVROUTE_ variable`).toBeGreaterThan(0);
      return unknownEnvVars(app, names).map((variable) => `${name} (${app}): ${variable}`);
    });
    expect(problems).toEqual([]);
  });

  it('runs every kvroute app from the one image built by infra/docker/Dockerfile', () => {
    for (const [name, service] of Object.entries(services).filter(([, service]) => kvrouteApp(service) !== null)) {
      expect(service.build, name).toEqual({ context: '.', dockerfile: 'infra/docker/Dockerfile', target: 'runtime' });
      expect(service.image, name).toMatch(/^kvroute:/);
    }
    expect(services['bench']?.build).toEqual({ context: '.', dockerfile: 'infra/docker/Dockerfile', target: 'bench' });
    expect(services['bench']?.command?.[0]).toBe('bench');
    expect(services['bench']?.profiles).toEqual(['bench']);
  });

  it('points routers and pollers at the same backends: the backend-N aliases, served by the sims or by vLLM', () => {
    const simPorts = new Set(SIMS.map((name) => serviceEnv(services[name] as ComposeService)['KVROUTE_SIM_PORT']));
    expect(simPorts.size).toBe(1);
    const simPort = [...simPorts][0] as string;
    for (const name of ROUTERS) expect(serviceEnv(services[name] as ComposeService)['KVROUTE_BACKENDS'], name).toBe(backendList(simPort));
    for (const name of POLLERS) expect(serviceEnv(services[name] as ComposeService)['KVROUTE_POLLER_BACKENDS'], name).toBe(backendList(simPort));
    // The backend list is a compose variable, so routers can be pointed at other servers.
    expect(String(services['router-1']?.environment?.['KVROUTE_BACKENDS'])).toMatch(/^\$\{BACKEND_URLS:-/);
    expect(String(services['poller-1']?.environment?.['KVROUTE_POLLER_BACKENDS'])).toMatch(/^\$\{BACKEND_URLS:-/);
    // Each alias is served exactly once per profile, on the same port.
    expect(SIMS.map((name) => aliasesOf(services[name] as ComposeService))).toEqual(BACKEND_ALIASES.map((alias) => [alias]));
    expect(VLLMS.map((name) => aliasesOf(services[name] as ComposeService))).toEqual(BACKEND_ALIASES.map((alias) => [alias]));
    for (const name of VLLMS) expect(flagValue(services[name]?.command ?? [], '--port'), name).toBe(simPort);
  });

  it('runs the sims (profile sim, the default through .env) or vLLM (profile gpu), never both', () => {
    for (const name of SIMS) expect(services[name]?.profiles, name).toEqual(['sim']);
    for (const name of VLLMS) expect(services[name]?.profiles, name).toEqual(['gpu']);
    const dotEnv = readDotEnv();
    expect(dotEnv['COMPOSE_PROFILES']).toBe('sim');
    expect(dotEnv['COMPOSE_PROJECT_NAME']).toBe('kvroute');
    for (const [name, service] of Object.entries(services)) {
      if (SIMS.includes(name) || VLLMS.includes(name) || name === 'bench') continue;
      expect(service.profiles, `${name} must run in every profile`).toBeUndefined();
    }
  });

  it('sims listen on all interfaces with distinct seeds and the a100-7b profile by default', () => {
    const envs = SIMS.map((name) => serviceEnv(services[name] as ComposeService));
    for (const env of envs) {
      expect(env['KVROUTE_SIM_HOST']).toBe('0.0.0.0');
      expect(env['KVROUTE_SIM_PROFILE']).toBe('a100-7b');
    }
    expect(new Set(envs.map((env) => env['KVROUTE_SIM_SEED'])).size).toBe(SIMS.length);
  });

  it('vLLM backends: prefix caching, cached-token reporting, a model variable, one NVIDIA GPU each', () => {
    const gpus: string[] = [];
    for (const name of VLLMS) {
      const service = services[name] as ComposeService;
      expect(service.image).toMatch(/^vllm\/vllm-openai:/);
      const command = service.command ?? [];
      expect(command).toEqual(expect.arrayContaining(['--enable-prefix-caching', '--enable-prompt-tokens-details', '--model']));
      expect(flagValue(command, '--model')).toMatch(/^\$\{VLLM_MODEL:-.+\}$/);
      const devices = service.deploy?.resources?.reservations?.devices ?? [];
      expect(devices).toHaveLength(1);
      expect(devices[0]?.driver).toBe('nvidia');
      expect(devices[0]?.capabilities).toEqual(['gpu']);
      gpus.push(...(devices[0]?.device_ids ?? []));
      expect(service.healthcheck?.test?.join(' ')).toContain('/health');
    }
    expect(new Set(gpus).size).toBe(VLLMS.length);
  });

  it('routers and pollers share the redis service and wait for it to be healthy', () => {
    for (const name of [...ROUTERS, ...POLLERS]) {
      const service = services[name] as ComposeService;
      const env = serviceEnv(service);
      expect(env['KVROUTE_REDIS_URL'] ?? env['KVROUTE_POLLER_REDIS_URL'], name).toBe('redis://redis:6379');
      expect(service.depends_on, name).toEqual({ redis: { condition: 'service_healthy' } });
    }
    expect(services['redis']?.healthcheck?.test).toEqual(['CMD', 'redis-cli', 'ping']);
  });

  it('mounts the infra files that exist, where the images read them', () => {
    const expectations: Array<[string, string, string]> = [
      ['haproxy', 'infra/haproxy/haproxy.cfg', '/usr/local/etc/haproxy/haproxy.cfg'],
      ['prometheus', 'infra/prometheus', '/etc/prometheus'],
      ['grafana', 'infra/grafana/provisioning', '/etc/grafana/provisioning'],
      ['grafana', 'infra/grafana/dashboards', '/var/lib/grafana/dashboards'],
    ];
    for (const [name, source, target] of expectations) {
      expect(bindMounts(services[name] as ComposeService), name).toContainEqual({ source, target });
      expect(existsSync(repoPath(source)), source).toBe(true);
    }
    const prometheusArgs = services['prometheus']?.command ?? [];
    expect(prometheusArgs).toContain('--config.file=/etc/prometheus/prometheus.yml');
  });

  it('publishes the OpenAI API (HAProxy :8080), Grafana :3000 and Prometheus :9090', () => {
    const published = (name: string) => (services[name]?.ports ?? []).map((port) => interpolateDefaults(port));
    expect(published('haproxy')).toContain('8080:8080');
    expect(published('grafana')).toContain('127.0.0.1:3000:3000');
    expect(published('prometheus')).toContain('127.0.0.1:9090:9090');
  });

  it('substitutes only variables with a default, so `docker compose up` needs no environment', () => {
    const text = readRepoFile('docker-compose.yml');
    const bare = [...text.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$(?![${])([A-Za-z_][A-Za-z0-9_]*)/g)].map((match) => match[0]);
    expect(bare).toEqual([]);
  });
});
