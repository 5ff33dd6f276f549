import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BackendRegistry } from '../backends/backend-registry';
import { simMatchAsker } from './true-match';
import { UpstreamPools } from './upstream-pool';

/** Fake backends, by path prefix: each answers /…/sim/match its own way. */
function fakeBackends(): Server {
  return createServer((request, response) => {
    let body = '';
    request.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
    request.on('end', () => {
      const [, kind] = (request.url ?? '').split('/');
      if (request.method !== 'POST' || !(request.url ?? '').endsWith('/sim/match')) return void response.writeHead(404).end();
      if (kind === 'answers') {
        const prompt = (JSON.parse(body) as { prompt: string }).prompt;
        return void response.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ prompt_tokens: 100, cached_tokens: prompt.length, prompts: [] }));
      }
      if (kind === 'fails') return void response.writeHead(500).end('{}');
      if (kind === 'garbles') return void response.writeHead(200, { 'content-type': 'application/json' }).end('{"cached_tokens":"many"}');
      // 'hangs': never answers.
    });
  });
}

describe('simMatchAsker', () => {
  let server: Server;
  let origin: string;
  beforeAll(async () => {
    server = fakeBackends();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it("posts the body to every backend's /sim/match under its base path, and counts any failure as no answer", async () => {
    const refused = createServer();
    await new Promise<void>((resolve) => refused.listen(0, '127.0.0.1', resolve));
    const refusedPort = (refused.address() as AddressInfo).port;
    await new Promise((resolve) => refused.close(resolve));
    const kinds = ['answers', 'fails', 'garbles', 'hangs'];
    const registry = new BackendRegistry(
      [...kinds.map((kind) => ({ url: `${origin}/${kind}/v1`, id: kind, models: ['m'], weight: 1 })), { url: `http://127.0.0.1:${refusedPort}`, id: 'refused', models: ['m'], weight: 1 }],
      { breakerFailureThreshold: 5, breakerCooldownMs: 1000, nowMs: () => 0, fetchModels: async () => [] },
    );
    const upstreams = new UpstreamPools({ connectTimeoutMs: 1000, headersTimeoutMs: 10_000, idleTimeoutMs: 10_000 });
    try {
      const startedAt = performance.now();
      const answers = await simMatchAsker(upstreams, 200)(registry.backends, Buffer.from(JSON.stringify({ model: 'm', prompt: 'seven!!' })));
      expect(Object.fromEntries(answers)).toEqual({ answers: 7, fails: null, garbles: null, hangs: null, refused: null });
      // Asked in parallel: one timeout, not one per backend.
      expect(performance.now() - startedAt).toBeLessThan(1000);
    } finally {
      await upstreams.destroy();
    }
  });
});
