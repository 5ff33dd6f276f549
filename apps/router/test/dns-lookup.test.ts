import { Resolver } from 'node:dns/promises';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { lookUpDnsBackends } from '../src/discovery/dns-discovery';
import { parseDiscoveryTarget } from '../src/discovery/discovery-target';
import { startLoopbackDns, type LoopbackDns } from './loopback-dns';

/**
 * One look at the records (src/discovery/dns-discovery.ts), against a real DNS server on loopback
 * (dns2), through node:dns's resolver as the router uses it.
 */
describe('DNS discovery lookups', () => {
  let dns: LoopbackDns;
  let resolver: Resolver;
  const look = (discovery: string, maxBackends = 256) =>
    lookUpDnsBackends({ target: parseDiscoveryTarget(discovery) as never, resolver, scheme: 'http', maxBackends });

  beforeAll(async () => {
    dns = await startLoopbackDns();
    resolver = new Resolver({ timeout: 300, tries: 1 });
    resolver.setServers([dns.server]);
  });
  afterAll(() => dns.close());
  beforeEach(() => {
    dns.mode = 'records';
    dns.zone.a.clear();
    dns.zone.aaaa.clear();
    dns.zone.srv.clear();
  });

  it('takes every A and AAAA address of a name, on the given port', async () => {
    dns.zone.a.set('vllm-headless.test', ['10.0.0.2', '10.0.0.1']);
    dns.zone.aaaa.set('vllm-headless.test', ['fd00::7']);
    const answer = await look('dns://vllm-headless.test:8000');
    expect(answer).toEqual({
      kind: 'backends',
      dropped: 0,
      backends: [
        { id: 'vllm-headless@10.0.0.1:8000', url: 'http://10.0.0.1:8000', draining: false },
        { id: 'vllm-headless@10.0.0.2:8000', url: 'http://10.0.0.2:8000', draining: false },
        { id: 'vllm-headless@fd00::7:8000', url: 'http://[fd00::7]:8000', draining: false },
      ],
    });
  });

  it('takes each SRV target address with its own port', async () => {
    dns.zone.srv.set('_http._tcp.vllm.test', [
      { target: 'pod-a.vllm.test', port: 8000 },
      { target: 'pod-b.vllm.test', port: 8001 },
      { target: 'gone.vllm.test', port: 8002 },
    ]);
    dns.zone.a.set('pod-a.vllm.test', ['10.0.0.1']);
    dns.zone.a.set('pod-b.vllm.test', ['10.0.0.2']);
    const answer = await look('dns+srv://_http._tcp.vllm.test');
    expect(answer.kind).toBe('backends');
    // A target without an address (NXDOMAIN) is no backend, and no failure.
    expect(answer.kind === 'backends' && answer.backends.map((backend) => backend.id)).toEqual([
      'vllm@10.0.0.1:8000',
      'vllm@10.0.0.2:8001',
    ]);
  });

  it('an unknown name or a name without records is an empty answer', async () => {
    expect(await look('dns://nothing.test:8000')).toEqual({ kind: 'backends', backends: [], dropped: 0 });
    dns.zone.aaaa.set('v6-only.test', []);
    expect(await look('dns://v6-only.test:8000')).toEqual({ kind: 'backends', backends: [], dropped: 0 });
    expect(await look('dns+srv://_http._tcp.nothing.test')).toEqual({ kind: 'backends', backends: [], dropped: 0 });
  });

  it('SERVFAIL and a server that does not answer are failures, not empty answers', async () => {
    dns.zone.a.set('vllm-headless.test', ['10.0.0.1']);
    dns.mode = 'servfail';
    const servfail = await look('dns://vllm-headless.test:8000');
    expect(servfail.kind).toBe('failed');
    dns.mode = 'silent';
    const silent = await look('dns+srv://_http._tcp.vllm.test');
    expect(silent.kind).toBe('failed');
    expect(silent.kind === 'failed' && (silent.error as NodeJS.ErrnoException).code).toBe('ETIMEOUT');
  });

  it('takes at most maxBackends, the same ones whatever the record order', async () => {
    const addresses = Array.from({ length: 20 }, (_, index) => `10.0.1.${index + 1}`);
    dns.zone.a.set('big.test', addresses);
    const answer = await look('dns://big.test:8000', 5);
    expect(answer.kind === 'backends' && answer.dropped).toBe(15);
    const kept = answer.kind === 'backends' ? answer.backends.map((backend) => backend.id) : [];
    dns.zone.a.set('big.test', [...addresses].reverse());
    const again = await look('dns://big.test:8000', 5);
    expect(again.kind === 'backends' && again.backends.map((backend) => backend.id)).toEqual(kept);
    expect(kept).toHaveLength(5);
  });
});
