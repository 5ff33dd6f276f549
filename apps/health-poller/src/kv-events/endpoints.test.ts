import { describe, expect, it } from 'vitest';
import { connectableEndpoint, offsetEndpointPort, rankStreams, type KvEventsDefaults } from './endpoints';

const defaults: KvEventsDefaults = { port: 5557, replayPort: null, replay: true, dataParallelSize: 1, model: null };

describe('rankStreams', () => {
  it('puts every backend on its own host at --kv-events-port, replay at + 1, pool = its only model', () => {
    expect(rankStreams({ id: 'gpu-0', url: 'http://10.0.0.7:8000', models: ['llama'] }, defaults)).toEqual([
      {
        rankId: 'gpu-0',
        backendId: 'gpu-0',
        rank: 0,
        endpoint: 'tcp://10.0.0.7:5557',
        replayEndpoint: 'tcp://10.0.0.7:5558',
        pool: 'llama',
      },
    ]);
    // No pool known, or no endpoint: no stream.
    expect(rankStreams({ id: 'x', url: 'http://h:1' }, defaults)).toEqual([]);
    expect(rankStreams({ id: 'x', url: 'http://h:1', models: ['m'] }, { ...defaults, port: null })).toEqual([]);
  });

  it('offsets each data-parallel rank as vLLM does (port + rank, rank 0 unchanged) and names ranks <id>@<rank>', () => {
    const streams = rankStreams(
      {
        id: 'dp',
        url: 'http://h:8000',
        kvEvents: { endpoint: 'tcp://h:6000', replayEndpoint: 'tcp://h:6100', dataParallelSize: 3, model: 'm' },
      },
      defaults,
    );
    expect(streams.map((s) => [s.rankId, s.endpoint, s.replayEndpoint])).toEqual([
      ['dp@0', 'tcp://h:6000', 'tcp://h:6100'],
      ['dp@1', 'tcp://h:6001', 'tcp://h:6101'],
      ['dp@2', 'tcp://h:6002', 'tcp://h:6102'],
    ]);
    expect(
      rankStreams({ id: 'n', url: 'http://h:1', kvEvents: { replayEndpoint: null, model: 'm' } }, defaults)[0]
        ?.replayEndpoint,
    ).toBeNull();
    // The shared set's dataParallel (hybrid LB: this node's ranks from global rank 4).
    const hybrid = rankStreams(
      { id: 'n2', url: 'http://h2:8000', models: ['m'], dataParallel: { size: 2, startRank: 4 } },
      defaults,
    );
    expect(hybrid.map((s) => [s.rankId, s.endpoint])).toEqual([
      ['n2@4', 'tcp://h2:5561'],
      ['n2@5', 'tcp://h2:5562'],
    ]);
    expect(offsetEndpointPort('tcp://[::1]:5557', 2)).toBe('tcp://[::1]:5559');
    expect(() => offsetEndpointPort('ipc:///tmp/x', 1)).toThrow(RangeError);
  });
});

describe('connectableEndpoint', () => {
  it("reads vLLM's bind syntax (tcp://*:port, 0.0.0.0, ::) as the backend's own host", () => {
    const streams = rankStreams(
      {
        id: 'w',
        url: 'http://10.1.2.3:8000',
        models: ['m'],
        kvEvents: { endpoint: 'tcp://*:5557', replayEndpoint: 'tcp://0.0.0.0:5600', dataParallelSize: 2 },
      },
      defaults,
    );
    expect(streams.map((s) => [s.endpoint, s.replayEndpoint])).toEqual([
      ['tcp://10.1.2.3:5557', 'tcp://10.1.2.3:5600'],
      ['tcp://10.1.2.3:5558', 'tcp://10.1.2.3:5601'],
    ]);
    // The replay endpoint derived from a wildcard PUB endpoint is the backend's host too.
    const derived = rankStreams(
      { id: 'v', url: 'http://[::1]:8000', models: ['m'], kvEvents: { endpoint: 'tcp://[::]:7000' } },
      defaults,
    );
    expect(derived.map((s) => [s.endpoint, s.replayEndpoint])).toEqual([['tcp://[::1]:7000', 'tcp://[::1]:7001']]);
    expect(connectableEndpoint('tcp://engine-3:5557', 'other')).toBe('tcp://engine-3:5557');
  });
});
