import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  BACKEND_ALIASES,
  POLLERS,
  ROUTERS,
  SIMS,
  VLLMS,
  backendList,
  PD_DECODE_SIMS,
  PD_PREFILL_SIMS,
  PD_ROUTER,
  PD_SIMS,
} from './compose-stack';
import { unknownEnvVars } from './config-keys';
import {
  aliasesOf,
  bindMounts,
  flagValue,
  interpolateDefaults,
  kvrouteApp,
  readCompose,
  readEnvExample,
  REPO_ROOT,
  readRepoFile,
  repoPath,
  serviceEnv,
  servicesOf,
  type ComposeService,
} from './stack-files';

const compose = readCompose();
const services = compose.services;

describe('docker-compose.yml', () => {
  it('has the stack: 3 routers, 2 pollers, 4 sims, 4 vLLM (gpu), redis and its exporter, haproxy, prometheus, grafana, bench', () => {
    expect(Object.keys(services).sort()).toEqual(
      [
        ...ROUTERS,
        ...POLLERS,
        ...SIMS,
        ...VLLMS,
        ...PD_SIMS,
        PD_ROUTER,
        'redis',
        'redis-exporter',
        'haproxy',
        'prometheus',
        'grafana',
        'bench',
      ].sort(),
    );
    expect(servicesOf(compose, 'router').map(([name]) => name)).toEqual([...ROUTERS, PD_ROUTER]);
    expect(servicesOf(compose, 'poller').map(([name]) => name)).toEqual(POLLERS);
    expect(servicesOf(compose, 'sim').map(([name]) => name)).toEqual([...SIMS, ...PD_SIMS]);
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
    for (const name of ROUTERS)
      expect(serviceEnv(services[name] as ComposeService)['KVROUTE_BACKENDS'], name).toBe(backendList(simPort));
    for (const name of POLLERS)
      expect(serviceEnv(services[name] as ComposeService)['KVROUTE_POLLER_BACKENDS'], name).toBe(backendList(simPort));
    // The backend list is a compose variable, so routers can be pointed at other servers.
    expect(String(services['router-1']?.environment?.['KVROUTE_BACKENDS'])).toMatch(/^\$\{BACKEND_URLS:-/);
    expect(String(services['poller-1']?.environment?.['KVROUTE_POLLER_BACKENDS'])).toMatch(/^\$\{BACKEND_URLS:-/);
    // Each alias is served exactly once per profile, on the same port.
    expect(SIMS.map((name) => aliasesOf(services[name] as ComposeService))).toEqual(
      BACKEND_ALIASES.map((alias) => [alias]),
    );
    expect(VLLMS.map((name) => aliasesOf(services[name] as ComposeService))).toEqual(
      BACKEND_ALIASES.map((alias) => [alias]),
    );
    for (const name of VLLMS) expect(flagValue(services[name]?.command ?? [], '--port'), name).toBe(simPort);
  });

  it('runs the sims (profile sim, the default through .env.example) or vLLM (profile gpu), never both', () => {
    for (const name of SIMS) expect(services[name]?.profiles, name).toEqual(['sim']);
    for (const name of VLLMS) expect(services[name]?.profiles, name).toEqual(['gpu']);
    for (const name of [...PD_SIMS, PD_ROUTER]) expect(services[name]?.profiles, name).toEqual(['pd']);
    const dotEnv = readEnvExample();
    expect(dotEnv['COMPOSE_PROFILES']).toBe('sim');
    expect(dotEnv['COMPOSE_PROJECT_NAME']).toBe('kvroute');
    for (const [name, service] of Object.entries(services)) {
      if (SIMS.includes(name) || VLLMS.includes(name) || PD_SIMS.includes(name) || name === PD_ROUTER) continue;
      if (name === 'bench') continue;
      expect(service.profiles, `${name} must run in every profile`).toBeUndefined();
    }
  });

  it('profile pd: prefill and decode sims, each naming its own reachable address, behind a router that knows their roles', () => {
    const url = (name: string): string => `http://${name}:8000`;
    for (const [names, role] of [
      [PD_PREFILL_SIMS, 'prefill'],
      [PD_DECODE_SIMS, 'decode'],
    ] as const) {
      for (const name of names) {
        const env = serviceEnv(services[name] as ComposeService);
        expect(env['KVROUTE_SIM_PD_ROLE'], name).toBe(role);
        // remote_host in its kv_transfer_params: where the decode side tells it the blocks were read.
        expect(env['KVROUTE_SIM_HOST'], name).toBe(name);
        expect(services[name]?.hostname, name).toBe(name);
        expect(env['KVROUTE_SIM_PORT'], name).toBe('8000');
      }
    }
    const router = serviceEnv(services[PD_ROUTER] as ComposeService);
    expect(router['KVROUTE_PREFILL_BACKENDS']).toBe(PD_PREFILL_SIMS.map(url).join(','));
    expect(router['KVROUTE_DECODE_BACKENDS']).toBe(PD_DECODE_SIMS.map(url).join(','));
    expect(router['KVROUTE_PD_PROTOCOL']).toBe('vllm-nixl');
    // Its own state: the shared backend set in Redis is routers 1-3's.
    expect(router['KVROUTE_BACKENDS']).toBeUndefined();
    expect(router['KVROUTE_REDIS_URL']).toBeUndefined();
    const seeds = PD_SIMS.map((name) => serviceEnv(services[name] as ComposeService)['KVROUTE_SIM_SEED']);
    expect(new Set(seeds).size).toBe(PD_SIMS.length);
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
      expect(command).toEqual(
        expect.arrayContaining(['--enable-prefix-caching', '--enable-prompt-tokens-details', '--model']),
      );
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

  it('routers and pollers share the redis service, with its password, and wait for it to be healthy', () => {
    for (const name of [...ROUTERS, ...POLLERS]) {
      const service = services[name] as ComposeService;
      const raw = service.environment ?? {};
      expect(raw['KVROUTE_REDIS_URL'] ?? raw['KVROUTE_POLLER_REDIS_URL'], name).toBe(
        'redis://:${REDIS_PASSWORD}@redis:6379',
      );
      expect(service.depends_on, name).toEqual({ redis: { condition: 'service_healthy' } });
    }
    const redis = services['redis'] as ComposeService;
    // Required: Compose refuses to start without it (compose.system.test.ts shows the message).
    expect(String(redis.environment?.['REDIS_PASSWORD'])).toMatch(/^\$\{REDIS_PASSWORD:\?.+\}$/);
    // Never an argument of redis-server or redis-cli (the host's ps shows those): a config file and REDISCLI_AUTH.
    const command = (redis.command ?? []).join(' ');
    expect(command).toContain('requirepass');
    expect(command).toMatch(/exec redis-server \/tmp\/redis-auth\.conf/);
    expect(command).not.toMatch(/--requirepass|redis-server [^|]*\$\$REDIS_PASSWORD/);
    expect(redis.environment?.['REDISCLI_AUTH']).toBe('${REDIS_PASSWORD}');
    // redis-cli exits 0 on NOAUTH: the health check must look at the answer.
    expect(redis.healthcheck?.test).toEqual(['CMD-SHELL', 'redis-cli ping | grep -q PONG']);
    expect(redis.user).toBe('999:999');
  });

  it("keeps Redis's data across restarts: an append-only file on a named volume, capped memory, noeviction", () => {
    const redis = services['redis'] as ComposeService;
    const command = interpolateDefaults((redis.command ?? []).join(' '));
    expect(command).toContain('--dir /data');
    expect(command).toContain('--appendonly yes --appendfsync everysec');
    expect(command).not.toContain('--appendonly no');
    expect(command).toMatch(/--maxmemory \d+[gm]b --maxmemory-policy noeviction/);
    expect(redis.volumes).toContain('redis-data:/data');
    expect(Object.keys(compose.volumes ?? {})).toContain('redis-data');
    // Its memory for the alerts: the exporter reads the same Redis with the same password, from env.
    const exporter = services['redis-exporter'] as ComposeService;
    expect(exporter.image).toMatch(/^oliver006\/redis_exporter:v\d/);
    expect(exporter.environment).toEqual({ REDIS_ADDR: 'redis://redis:6379', REDIS_PASSWORD: '${REDIS_PASSWORD}' });
    expect(exporter.command).toBeUndefined();
  });

  it('ships .env.example, and keeps .env (where the setup writes the Redis password) out of git', () => {
    expect(existsSync(repoPath('.env.example'))).toBe(true);
    expect(readEnvExample()['REDIS_PASSWORD']).toBeUndefined();
    const git = (...args: string[]) => spawnSync('git', args, { cwd: REPO_ROOT, encoding: 'utf8' });
    expect(git('ls-files', '--', '.env').stdout).toBe('');
    expect(git('check-ignore', '-q', '--no-index', '.env').status).toBe(0);
    expect(readRepoFile('.dockerignore').split('\n')).toContain('.env');
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

  it('substitutes only variables with a default, but for the Redis password, which Compose demands (`:?`) once and uses as given', () => {
    const text = readRepoFile('docker-compose.yml');
    // `$$NAME` is an escaped dollar (the container's shell expands it), not a Compose variable.
    const bare = [...text.matchAll(/\$\{([A-Za-z_][A-Za-z0-9_]*)\}|(?<!\$)\$(?![${])([A-Za-z_][A-Za-z0-9_]*)/g)].map(
      (match) => match[0],
    );
    expect(new Set(bare)).toEqual(new Set(['${REDIS_PASSWORD}']));
    expect(text.match(/\$\{REDIS_PASSWORD:\?/g)).toHaveLength(1);
  });
});
