import { request as httpRequest } from 'node:http';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { FakeResponsesBackend } from './fake-responses-backend';
import { scrapeAt, sumWhere } from './metrics-scrape';
import { waitFor } from './start-test-cluster';

/**
 * A stored response's GET, DELETE and cancel (pipeline/stored-response.ts), on an engine that does not
 * answer or fails them: they go out through the send stage, so the deadline, the circuit breaker and
 * the request metrics apply to them as to every other request. The owner map's part (which backend,
 * 404, 503) is in responses-api.test.ts.
 */
describe('Responses API: a stored response on an engine that does not answer', () => {
  it('a client leaving aborts the upstream GET/DELETE; one that waits gets 504 after the headers timeout', async () => {
    const backend = await new FakeResponsesBackend().start();
    const routerWith = async (extra: Partial<RouterConfig>): Promise<RouterServer> =>
      createRouterServer(
        RouterConfig.parse({
          host: '127.0.0.1',
          port: 0,
          opsPort: 0,
          backends: [{ url: backend.url, models: ['test-model'] }],
          ...extra,
        }),
      );
    // Default timeouts (the stored-response calls' headers timeout: 30 s): only the client's leaving can end the call soon.
    const patient = await routerWith({});
    // A short streamFirstByteTimeoutMs caps that headers timeout too.
    const hasty = await routerWith({ streamFirstByteTimeoutMs: 300 });
    const create = async (base: string): Promise<string> =>
      (
        (await (
          await fetch(base, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ model: 'test-model', input: 'hi' }),
          })
        ).json()) as { id: string }
      ).id;
    try {
      const base = `${await patient.listen()}/v1/responses`;
      const id = await create(base);
      backend.stored = 'hang';
      for (const method of ['GET', 'DELETE'] as const) {
        // A client of its own connection (node:http, no pool), so that leaving closes it.
        const leaving = httpRequest(`${base}/${id}`, { method, agent: false });
        leaving.on('error', () => undefined);
        leaving.end();
        await waitFor(() => backend.requests(method, '/v1/responses/').length === 1);
        leaving.destroy();
        // The engine sees the router's call go away (no timeout of the router's would end it for 30 s).
        await waitFor(() => backend.requests(method, '/v1/responses/')[0]?.abortedBeforeAnswer === true, 10_000);
      }

      const hastyBase = `${await hasty.listen()}/v1/responses`;
      const waited = await fetch(`${hastyBase}/${await create(hastyBase)}`);
      expect(waited.status).toBe(504);
      expect(((await waited.json()) as { error: { code: string } }).error.code).toBe('ROUTER_ERR_UPSTREAM_TIMEOUT');
    } finally {
      await patient.close();
      await hasty.close();
      await backend.close();
    }
  });
});

describe("Responses API: a stored response's calls go through the send stage", () => {
  it(
    "a failing owner's GET, cancel and DELETE count in its circuit breaker, which then refuses them (503) " +
      'before they reach it, and in the request metrics',
    async () => {
      const backend = await new FakeResponsesBackend().start();
      const backendId = new URL(backend.url).host;
      const router = await createRouterServer(
        RouterConfig.parse({
          host: '127.0.0.1',
          port: 0,
          opsPort: 0,
          backends: [{ url: backend.url, models: ['test-model'] }],
          breakerFailureThreshold: 3,
          // No half-open probe during the test: the circuit stays open once opened.
          breakerCooldownMs: 600_000,
        }),
      );
      try {
        const routerUrl = await router.listen();
        const client = new OpenAI({ baseURL: `${routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
        const created = await client.responses.create({ model: 'test-model', input: 'keep me' });
        expect((await client.responses.retrieve(created.id)).id).toBe(created.id);
        backend.stored = 'fail';
        // The engine's 500s keep their status (their bodies replaced), and each is a failure of that backend.
        await expect(client.responses.retrieve(created.id)).rejects.toMatchObject({ status: 500 });
        await expect(client.responses.cancel(created.id)).rejects.toMatchObject({ status: 500 });
        await expect(client.responses.delete(created.id)).rejects.toMatchObject({ status: 500 });
        expect(router.registry.get(backendId)?.breaker.state).toBe('open');
        // Open: refused by the router, and the engine does not see the call.
        await expect(client.responses.retrieve(created.id)).rejects.toMatchObject({
          status: 503,
          error: { code: 'ROUTER_ERR_NO_BACKEND' },
        });
        expect(backend.requests('GET', '/v1/responses/')).toHaveLength(2);
        // The same breaker as generation's: a create finds no backend either.
        await expect(client.responses.create({ model: 'test-model', input: 'more' })).rejects.toMatchObject({
          status: 503,
        });
        expect(backend.requests('POST', '/v1/responses')).toHaveLength(2);

        const samples = await scrapeAt(router.opsUrl as string);
        const stored = { backend: backendId, model: '', policy: 'none', reason: 'response-owner' };
        expect(sumWhere(samples, 'kvroute_router_requests_total', { ...stored, status: '200' })).toBe(1);
        expect(sumWhere(samples, 'kvroute_router_requests_total', { ...stored, status: '500' })).toBe(3);
        expect(
          sumWhere(samples, 'kvroute_router_request_duration_seconds_count', { backend: backendId, model: '' }),
        ).toBe(4);
        expect(sumWhere(samples, 'kvroute_router_backend_circuit_state', { backend: backendId })).toBe(2);
        expect(sumWhere(samples, 'kvroute_router_rejected_requests_total', { code: 'ROUTER_ERR_NO_BACKEND' })).toBe(2);
      } finally {
        await router.close();
        await backend.close();
      }
    },
  );
});

describe('Responses API: a half-open probe whose client leaves', () => {
  it('frees the probe slot: the next call probes the owner again instead of finding its circuit stuck', async () => {
    const backend = await new FakeResponsesBackend().start();
    const router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: [{ url: backend.url, models: ['test-model'] }],
        breakerFailureThreshold: 1,
        breakerCooldownMs: 100,
      }),
    );
    try {
      const base = `${await router.listen()}/v1/responses`;
      const created = await fetch(base, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'test-model', input: 'hi' }),
      });
      const id = ((await created.json()) as { id: string }).id;
      backend.stored = 'fail';
      expect((await fetch(`${base}/${id}`)).status).toBe(500);
      expect((await fetch(`${base}/${id}`)).status).toBe(503);
      await new Promise((resolve) => setTimeout(resolve, 150));
      // Half-open: this GET is the probe; its client leaves before the engine answers.
      backend.stored = 'hang';
      const leaving = httpRequest(`${base}/${id}`, { agent: false });
      leaving.on('error', () => undefined);
      leaving.end();
      await waitFor(() => backend.requests('GET', '/v1/responses/').length === 2);
      leaving.destroy();
      await waitFor(() => backend.requests('GET', '/v1/responses/')[1]?.abortedBeforeAnswer === true, 10_000);
      backend.stored = 'answer';
      const probe = await fetch(`${base}/${id}`);
      expect(probe.status).toBe(200);
      expect(router.registry.get(new URL(backend.url).host)?.breaker.state).toBe('closed');
    } finally {
      await router.close();
      await backend.close();
    }
  });
});
