import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { UpstreamKeys } from '@kvroute/platform';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BackendRegistry, type Backend } from '../backends/backend-registry';
import { UpstreamPools } from '../proxy/upstream-pool';
import { searchStoredResponse } from './stored-response-search';

/**
 * The open-mode search of a stored response (stored-response-search.ts), against real HTTP servers: at
 * most `maxParallel` probes at once, within `timeoutMs`, the first 200 winning, one probe per engine.
 */
describe('searchStoredResponse', () => {
  const servers: Server[] = [];
  let inFlight = 0;
  let mostInFlight = 0;
  let probes: string[] = [];
  /** Which server holds which id; `hang`: never answers. */
  const holds = new Map<number, string>();
  let hangs = new Set<number>();
  let registry: BackendRegistry;
  let upstreams: UpstreamPools;

  beforeAll(async () => {
    for (let index = 0; index < 12; index++) {
      const server = createServer((request, response) => {
        probes.push(`${index} ${request.url}`);
        inFlight++;
        mostInFlight = Math.max(mostInFlight, inFlight);
        response.on('close', () => inFlight--);
        if (hangs.has(index)) return;
        setTimeout(() => {
          const status = request.url === `/v1/responses/${holds.get(index)}` ? 200 : 404;
          response.writeHead(status, { 'content-type': 'application/json' }).end('{}');
        }, 40);
      });
      server.listen(0, '127.0.0.1');
      await once(server, 'listening');
      servers.push(server);
    }
    const urls = servers.map((server) => `http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    registry = new BackendRegistry(
      [
        ...urls.slice(0, 11).map((url) => ({ url, models: ['m'], weight: 1 })),
        // The last engine has two data-parallel ranks (two backends): one store, probed once.
        {
          url: urls[11] as string,
          id: 'dp',
          models: ['m'],
          weight: 1,
          dataParallel: { size: 2, startRank: 0, hybridLb: false },
        },
      ],
      { breakerFailureThreshold: 3, breakerCooldownMs: 1_000, nowMs: () => 0, fetchModels: async () => [] },
    );
    upstreams = new UpstreamPools({
      connectTimeoutMs: 1_000,
      headersTimeoutMs: 10_000,
      idleTimeoutMs: 10_000,
      keys: UpstreamKeys.none(),
    });
  });

  afterAll(async () => {
    await upstreams?.close();
    for (const server of servers) {
      server.closeAllConnections();
      server.close();
    }
  });

  const search = (backends: readonly Backend[], id: string, timeoutMs = 2_000) =>
    searchStoredResponse({ upstreams, maxParallel: 4, timeoutMs }, backends, id);
  const reset = () => {
    probes = [];
    mostInFlight = 0;
    holds.clear();
    hangs = new Set();
  };

  it('asks at most maxParallel backends at once, each engine once, and finds the holder', async () => {
    reset();
    holds.set(10, 'resp_x');
    const found = await search(registry.backends, 'resp_x');
    expect(found?.origin).toBe(`http://127.0.0.1:${(servers[10]?.address() as AddressInfo).port}`);
    expect(mostInFlight).toBeLessThanOrEqual(4);
    expect(mostInFlight).toBeGreaterThan(1);
    expect(new Set(probes).size).toBe(probes.length);
    expect(registry.backends).toHaveLength(13);
  });

  it('asks each engine once: data-parallel ranks share one store', async () => {
    reset();
    expect(await search(registry.backends, 'resp_nowhere')).toBeNull();
    expect(probes).toHaveLength(12);
    expect(new Set(probes).size).toBe(12);
  });

  it('stops asking once one answered 200', async () => {
    reset();
    holds.set(0, 'resp_first');
    await search(registry.backends, 'resp_first');
    expect(probes.length).toBeLessThanOrEqual(4);
  });

  it('gives up at its bound when backends never answer', async () => {
    reset();
    hangs = new Set(servers.map((_, index) => index));
    const startedAt = performance.now();
    expect(await search(registry.backends, 'resp_none', 300)).toBeNull();
    expect(performance.now() - startedAt).toBeLessThan(1_000);
  });
});
