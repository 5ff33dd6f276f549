import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  backendsFromSlices,
  parseSliceList,
  parseWatchLine,
  summarizeSlice,
  type SliceBackendsOptions,
  type SliceSummary,
} from './endpoint-slices';

const fixture = (name: string): string =>
  readFileSync(new URL(`../../test/fixtures/kubernetes/${name}`, import.meta.url), 'utf8');
const OPTIONS: SliceBackendsOptions = { sourceName: 'vllm', scheme: 'http', portName: null, maxBackends: 256 };
/** The backends as `id` (eligible) or `id (draining)`. */
const describeBackends = (slices: Iterable<SliceSummary>, options: Partial<SliceBackendsOptions> = {}): string[] =>
  backendsFromSlices(slices, { ...OPTIONS, ...options }).backends.map((backend) =>
    backend.draining ? `${backend.id} (draining)` : backend.id,
  );

describe('EndpointSlices (recorded API responses)', () => {
  it("takes each slice's llm-d.ai/role label as its endpoints' role; an unknown value is none", () => {
    const slice = (role: unknown) => ({
      metadata: { name: `s-${String(role)}`, labels: { 'llm-d.ai/role': role } },
      addressType: 'IPv4',
      ports: [{ name: 'http', port: 8000, protocol: 'TCP' }],
      endpoints: [{ addresses: ['10.0.0.1'], conditions: { ready: true } }],
    });
    const rolesOf = (role: unknown) =>
      backendsFromSlices([summarizeSlice(slice(role)) as SliceSummary], OPTIONS).backends.map(
        (backend) => backend.role,
      );
    expect(rolesOf('prefill')).toEqual(['prefill']);
    expect(rolesOf('decode')).toEqual(['decode']);
    expect(rolesOf('sideways')).toEqual([undefined]);
    expect(summarizeSlice(slice(7))?.role).toBeNull();
  });

  it('a list: ready endpoints are backends on the `http` port, a not-ready one is none, unknown conditions count as ready', () => {
    const list = parseSliceList(JSON.parse(fixture('endpointslices-list.json')));
    expect(list?.resourceVersion).toBe('48211');
    expect(list?.slices.map((slice) => slice.name)).toEqual(['vllm-7xk2p', 'vllm-q9w4z']);
    expect(describeBackends(list?.slices ?? [])).toEqual([
      'vllm@10.244.1.5:8000',
      'vllm@10.244.2.7:8000',
      'vllm@10.244.4.2:8000',
    ]);
    expect(backendsFromSlices(list?.slices ?? [], OPTIONS).backends[0]?.url).toBe('http://10.244.1.5:8000');
    // A named port wins over the `http` default.
    expect(describeBackends(list?.slices ?? [], { portName: 'metrics' })).toEqual([
      'vllm@10.244.1.5:9090',
      'vllm@10.244.2.7:9090',
      'vllm@10.244.4.2:9090',
    ]);
    expect(describeBackends(list?.slices ?? [], { portName: 'grpc' })).toEqual([]);
  });

  it('a watch stream: terminating → draining, ADDED, DELETED, the terminated pod gone; bookmarks move the resourceVersion', () => {
    const slices = new Map(
      (parseSliceList(JSON.parse(fixture('endpointslices-list.json')))?.slices ?? []).map((slice) => [
        slice.name,
        slice,
      ]),
    );
    const steps: Array<{ type: string; resourceVersion: string | null; backends: string[] }> = [];
    for (const line of fixture('endpointslices-watch.jsonl')
      .split('\n')
      .filter((text) => text.trim() !== '')) {
      const event = parseWatchLine(line);
      if (event === null || event.type === 'expired' || event.type === 'error') throw new Error(`unexpected ${line}`);
      if (event.type === 'DELETED') slices.delete(event.slice.name);
      else if (event.type !== 'BOOKMARK') slices.set(event.slice.name, event.slice);
      steps.push({
        type: event.type,
        resourceVersion: event.resourceVersion,
        backends: describeBackends(slices.values()),
      });
    }
    expect(steps).toEqual([
      {
        type: 'MODIFIED',
        resourceVersion: '48230',
        backends: [
          'vllm@10.244.1.5:8000 (draining)',
          'vllm@10.244.2.7:8000',
          'vllm@10.244.3.9:8000',
          'vllm@10.244.4.2:8000',
        ],
      },
      {
        type: 'BOOKMARK',
        resourceVersion: '48240',
        backends: [
          'vllm@10.244.1.5:8000 (draining)',
          'vllm@10.244.2.7:8000',
          'vllm@10.244.3.9:8000',
          'vllm@10.244.4.2:8000',
        ],
      },
      {
        type: 'ADDED',
        resourceVersion: '48251',
        backends: [
          'vllm@10.244.1.5:8000 (draining)',
          'vllm@10.244.2.7:8000',
          'vllm@10.244.3.9:8000',
          'vllm@10.244.4.2:8000',
          'vllm@10.244.5.1:8000',
        ],
      },
      {
        type: 'DELETED',
        resourceVersion: '48260',
        backends: [
          'vllm@10.244.1.5:8000 (draining)',
          'vllm@10.244.2.7:8000',
          'vllm@10.244.3.9:8000',
          'vllm@10.244.5.1:8000',
        ],
      },
      {
        type: 'MODIFIED',
        resourceVersion: '48272',
        backends: ['vllm@10.244.2.7:8000', 'vllm@10.244.3.9:8000', 'vllm@10.244.5.1:8000'],
      },
    ]);
  });

  it('410 Gone is `expired`; another ERROR is an error', () => {
    expect(parseWatchLine(fixture('watch-expired.jsonl').trim())).toEqual({ type: 'expired' });
    expect(parseWatchLine('{"type":"ERROR","object":{"kind":"Status","code":500,"message":"internal"}}')).toEqual({
      type: 'error',
      message: 'internal',
    });
  });

  it('never throws on data of the wrong shape: skips it', () => {
    for (const line of [
      '',
      'not json',
      'null',
      '[]',
      '{"type":"ADDED"}',
      '{"type":"ADDED","object":{"metadata":{}}}',
      '{"type":"BOOKMARK","object":{}}',
      '{"type":"WHAT","object":{"metadata":{"name":"x"}}}',
    ]) {
      expect(parseWatchLine(line)).toBeNull();
    }
    expect(parseSliceList({ items: 'no' })).toBeNull();
    expect(parseSliceList(null)).toBeNull();
    const odd = summarizeSlice({
      metadata: { name: 'odd' },
      addressType: 'IPv4',
      endpoints: [
        { addresses: ['not-an-ip'] },
        { addresses: [] },
        { addresses: [42] },
        'junk',
        { addresses: ['10.0.0.1'], conditions: 'junk' },
      ],
      ports: [{ port: 0 }, { port: 'x' }, { port: 8000, protocol: 'UDP' }, { port: 8001 }],
    });
    expect(odd?.endpoints).toEqual([{ address: '10.0.0.1', ready: true, serving: true, terminating: false }]);
    expect(describeBackends([odd as SliceSummary])).toEqual(['vllm@10.0.0.1:8001']);
    // FQDN slices name hosts, not addresses: skipped.
    expect(describeBackends([{ ...(odd as SliceSummary), addressType: 'FQDN' }])).toEqual([]);
  });

  it('IPv6 endpoints get bracketed URLs; a terminating endpoint no longer serving is no backend', () => {
    const slice = summarizeSlice({
      metadata: { name: 'v6' },
      addressType: 'IPv6',
      endpoints: [
        { addresses: ['fd00::5'], conditions: { ready: true } },
        { addresses: ['fd00::6'], conditions: { ready: false, serving: false, terminating: true } },
      ],
      ports: [{ name: 'http', port: 8000 }],
    }) as SliceSummary;
    expect(backendsFromSlices([slice], OPTIONS).backends).toEqual([
      { id: 'vllm@fd00::5:8000', url: 'http://[fd00::5]:8000', draining: false },
    ]);
  });

  it('caps the backends taken', () => {
    const slice = summarizeSlice({
      metadata: { name: 'big' },
      addressType: 'IPv4',
      endpoints: Array.from({ length: 50 }, (_, index) => ({ addresses: [`10.1.0.${index + 1}`] })),
      ports: [{ port: 8000 }],
    }) as SliceSummary;
    const capped = backendsFromSlices([slice], { ...OPTIONS, maxBackends: 10 });
    expect(capped.backends).toHaveLength(10);
    expect(capped.dropped).toBe(40);
  });
});
