import { BlockList } from 'node:net';
import { describe, expect, it } from 'vitest';
import {
  bindMounts,
  haproxySection,
  interpolateDefaults,
  networksOf,
  parseHaproxyConfig,
  readCompose,
  readRepoFile,
  serviceEnv,
  servicesOf,
  type ComposeService,
} from './stack-files';

const sections = parseHaproxyConfig(readRepoFile('infra/haproxy/haproxy.cfg'));
const compose = readCompose();

describe('infra/haproxy/haproxy.cfg', () => {
  it('balances TCP, retries on another router and redispatches', () => {
    const defaults = haproxySection(sections, 'defaults');
    expect(defaults.lines).toContain('mode tcp');
    expect(defaults.lines.some((line) => /^retries [1-9]/.test(line))).toBe(true);
    expect(defaults.lines.some((line) => /^option redispatch\b/.test(line))).toBe(true);
    for (const timeout of ['connect', 'client', 'server'])
      expect(
        defaults.lines.some((line) => line.startsWith(`timeout ${timeout} `)),
        timeout,
      ).toBe(true);
  });

  it('listens where compose publishes the OpenAI API and sends to the routers', () => {
    const frontend = haproxySection(sections, 'frontend', 'openai');
    expect(frontend.lines).toContain('bind :8080');
    expect(frontend.lines).toContain('default_backend routers');
    expect(compose.services['haproxy']?.ports?.some((port) => port.endsWith(':8080'))).toBe(true);
    expect(bindMounts(compose.services['haproxy'] as ComposeService)).toContainEqual({
      source: 'infra/haproxy/haproxy.cfg',
      target: '/usr/local/etc/haproxy/haproxy.cfg',
    });
  });

  it('lists exactly the router services of docker-compose.yml, on their KVROUTE_PORT', () => {
    const servers = haproxySection(sections, 'backend', 'routers')
      .lines.filter((line) => line.startsWith('server '))
      .map((line) => line.split(' ').slice(1, 3));
    const routers = servicesOf(compose, 'router')
      .filter(([, service]) => !service.profiles?.includes('pd'))
      .map(([name, service]) => [name, `${name}:${serviceEnv(service)['KVROUTE_PORT']}`]);
    expect(routers).toHaveLength(3);
    expect(servers).toEqual(routers);
  });

  it('takes a router out of rotation when its /readyz fails (draining), checking every second', () => {
    const backend = haproxySection(sections, 'backend', 'routers');
    expect(backend.lines).toContain('option httpchk');
    expect(backend.lines.find((line) => line.startsWith('http-check send'))).toMatch(/meth GET uri \/readyz\b/);
    expect(backend.lines).toContain('http-check expect status 200');
    const defaultServer = backend.lines.find((line) => line.startsWith('default-server')) ?? '';
    expect(defaultServer).toMatch(/\bcheck\b/);
    expect(defaultServer).toMatch(/\binter 1s\b/);
    // Compose hostnames resolve only inside the stack: start anyway, resolve later.
    expect(defaultServer).toMatch(/\binit-addr \S*none\b/);
    expect(defaultServer).toMatch(/\bresolvers docker\b/);
    haproxySection(sections, 'resolvers', 'docker');
  });

  it('sends each connection’s real client (PROXY v2) to routers that take the header from HAProxy’s address only', () => {
    const defaultServer =
      haproxySection(sections, 'backend', 'routers').lines.find((line) => line.startsWith('default-server')) ?? '';
    expect(defaultServer).toMatch(/\bsend-proxy-v2\b/);
    const haproxy = compose.services['haproxy'] as ComposeService;
    // HAProxy is on the balancer network alone, at a fixed address inside its fixed subnet.
    expect(networksOf(haproxy)).toEqual(['balancer']);
    const networks = haproxy.networks as Record<string, { ipv4_address?: string }>;
    const address = interpolateDefaults(networks['balancer']?.ipv4_address ?? '');
    const subnet = interpolateDefaults(compose.networks?.['balancer']?.ipam?.config?.[0]?.subnet ?? '');
    const [base = '', prefix = ''] = subnet.split('/');
    const inSubnet = new BlockList();
    inSubnet.addSubnet(base, Number(prefix), 'ipv4');
    expect(inSubnet.check(address, 'ipv4'), `${address} in ${subnet}`).toBe(true);
    // Every router trusts exactly that address, and is on the balancer network (and the default one, for Redis,
    // the backends and Prometheus, whose connections carry no header).
    const routers = servicesOf(compose, 'router').filter(([, service]) => !service.profiles?.includes('pd'));
    for (const [name, router] of routers) {
      expect(serviceEnv(router)['KVROUTE_PROXY_PROTOCOL_FROM'], name).toBe(address);
      expect(networksOf(router).sort(), name).toEqual(['balancer', 'default']);
    }
  });
});
