import { describe, expect, it } from 'vitest';
import { RouterConfig } from '../config';
import { sliceSelectorOf } from './kubernetes-discovery';
import { parseDiscoveryTarget } from './discovery-target';

describe('parseDiscoveryTarget', () => {
  it('parses the three kinds, with the id prefix taken from the name', () => {
    expect(parseDiscoveryTarget('dns://vllm-headless.default.svc.cluster.local:8000')).toEqual({
      kind: 'dns',
      host: 'vllm-headless.default.svc.cluster.local',
      port: 8000,
      name: 'vllm-headless',
    });
    expect(parseDiscoveryTarget('dns+srv://_http._tcp.vllm.default.svc.cluster.local')).toEqual({
      kind: 'dns+srv',
      service: '_http._tcp.vllm.default.svc.cluster.local',
      name: 'vllm',
    });
    expect(parseDiscoveryTarget('k8s://vllm')).toEqual({
      kind: 'k8s',
      namespace: null,
      service: 'vllm',
      services: ['vllm'],
      portName: null,
      name: 'vllm',
    });
    expect(parseDiscoveryTarget('k8s://inference/vllm:http', 'gpu')).toEqual({
      kind: 'k8s',
      namespace: 'inference',
      service: 'vllm',
      services: ['vllm'],
      portName: 'http',
      name: 'gpu',
    });
    // A prefill and a decode Service, one watch: each slice's llm-d.ai/role gives its backends their role.
    const pd = parseDiscoveryTarget('k8s://inference/vllm-prefill,vllm-decode:http');
    expect(pd).toMatchObject({
      service: 'vllm-prefill',
      services: ['vllm-prefill', 'vllm-decode'],
      name: 'vllm-prefill',
    });
    expect(sliceSelectorOf(pd.kind === 'k8s' ? pd.services : [])).toBe(
      'kubernetes.io/service-name in (vllm-prefill,vllm-decode)',
    );
    expect(sliceSelectorOf(['vllm'])).toBe('kubernetes.io/service-name=vllm');
  });

  it.each([
    'vllm:8000',
    'dns://vllm',
    'dns://vllm:0',
    'dns://vllm:70000',
    'dns+srv://vllm.default',
    'k8s://Vllm',
    'k8s://a/b/c',
    'k8s://a,,b',
    'k8s://a,B',
    `k8s://${Array.from({ length: 17 }, (_, index) => `s${index}`).join(',')}`,
    'consul://vllm',
    'dns://bad name:80',
  ])('refuses %s', (value) => {
    expect(() => parseDiscoveryTarget(value)).toThrow();
  });

  it('the config needs backends or discovery, and checks the discovery value', () => {
    expect(RouterConfig.safeParse({}).success).toBe(false);
    expect(RouterConfig.safeParse({ discovery: 'dns://vllm:8000' }).success).toBe(true);
    const bad = RouterConfig.safeParse({ discovery: 'dns://vllm' });
    expect(bad.success).toBe(false);
    expect(bad.error?.issues[0]?.path).toEqual(['discovery']);
    expect(RouterConfig.safeParse({ discovery: 'dns://vllm:8000', discoveryName: 'has space' }).success).toBe(false);
    expect(
      RouterConfig.safeParse({
        discovery: 'dns://vllm:8000',
        discoveryDnsServers: ['127.0.0.1:5353', '[::1]:53', '10.96.0.10'],
      }).success,
    ).toBe(true);
    expect(
      RouterConfig.safeParse({ discovery: 'dns://vllm:8000', discoveryDnsServers: ['kube-dns'] }).error?.issues[0]
        ?.path,
    ).toEqual(['discoveryDnsServers']);
  });
});
