import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import { startLoopbackServer, type LoopbackServer } from '@kvroute/testing';
import { Agent } from 'undici';
import { afterEach, describe, expect, it } from 'vitest';
import type { DiscoveryAnswer } from '../src/discovery/backend-source';
import { parseDiscoveryTarget } from '../src/discovery/discovery-target';
import { EndpointSliceSource } from '../src/discovery/kubernetes-discovery';
import { RouterConfig } from '../src/config';
import { createRouterServer } from '../src/create-router';
import { waitFor } from './start-test-cluster';

/**
 * EndpointSlice discovery against a loopback HTTP server standing in for the Kubernetes API server,
 * serving the recorded responses in test/fixtures/kubernetes: list, watch from its resourceVersion,
 * a watch that ends (watched again from the last version), 410 Gone (listed again), a 500 (retried).
 */
const fixture = (name: string): string => readFileSync(new URL(`fixtures/kubernetes/${name}`, import.meta.url), 'utf8');
const SLICES_PATH = '/apis/discovery.k8s.io/v1/namespaces/inference/endpointslices';

interface ApiRequest {
  readonly path: string;
  readonly query: URLSearchParams;
  readonly authorization: string | undefined;
}

/** The stand-in: each list and watch request is answered by the next handler of its kind (the last one repeats). */
async function startApiServer(script: {
  list: Array<(response: ServerResponse) => void>;
  watch: Array<(response: ServerResponse) => void>;
}): Promise<LoopbackServer & { requests: ApiRequest[] }> {
  const requests: ApiRequest[] = [];
  const served = { list: 0, watch: 0 };
  const server = await startLoopbackServer((request: IncomingMessage, response: ServerResponse) => {
    const url = new URL(request.url ?? '/', 'http://api');
    requests.push({ path: url.pathname, query: url.searchParams, authorization: request.headers.authorization });
    if (url.pathname !== SLICES_PATH || url.searchParams.get('labelSelector') !== 'kubernetes.io/service-name=vllm') {
      response.writeHead(404).end();
      return;
    }
    const kind = url.searchParams.get('watch') === '1' ? 'watch' : 'list';
    const handlers = script[kind];
    const handler = handlers[Math.min(served[kind]++, handlers.length - 1)] as (response: ServerResponse) => void;
    handler(response);
  });
  return Object.assign(server, { requests });
}

const json =
  (body: string, status = 200) =>
  (response: ServerResponse) => {
    response.writeHead(status, { 'content-type': 'application/json' }).end(body);
  };
/** A watch stream: the lines, then (unless held) the end of the watch. */
const stream =
  (lines: string, hold = false) =>
  (response: ServerResponse) => {
    response.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    // One event per write, as the API server flushes them.
    for (const line of lines.split('\n').filter((text) => text.trim() !== '')) response.write(`${line}\n`);
    if (!hold) response.end();
  };
const held = (response: ServerResponse) => stream('', true)(response);

/** A source on the stand-in at `url`: the options every test shares, then its own. */
const sourceOn = (
  url: string,
  dispatcher: Agent,
  overrides: Partial<ConstructorParameters<typeof EndpointSliceSource>[0]> = {},
): EndpointSliceSource =>
  new EndpointSliceSource({
    target: parseDiscoveryTarget('k8s://inference/vllm:http') as never,
    namespace: 'inference',
    api: { url, dispatcher, token: async () => null },
    scheme: 'http',
    maxBackends: 256,
    watchTimeoutSeconds: 300,
    requestTimeoutMs: 2_000,
    retryDelayMs: () => 5,
    ...overrides,
  });

const summary = (answer: DiscoveryAnswer): string[] | 'failed' =>
  answer.kind === 'failed'
    ? 'failed'
    : answer.backends.map((backend) => (backend.draining ? `${backend.id} (draining)` : backend.id));

describe('EndpointSliceSource against a stand-in API server', () => {
  const cleanups: Array<() => Promise<unknown>> = [];
  afterEach(async () => {
    for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  });

  it('lists, watches from the resourceVersion, re-watches from the last one, re-lists on 410 Gone, retries after a 500', async () => {
    const list = fixture('endpointslices-list.json');
    const relisted = list.replace('"resourceVersion": "48211"', '"resourceVersion": "48300"');
    const api = await startApiServer({
      list: [
        json(list),
        json(relisted),
        json('{"kind":"Status","code":500,"message":"etcd unavailable"}', 500),
        json(relisted),
      ],
      // 1: the recorded events, then the server ends the watch; 2: 410 as an event; 3: 410 as a status; 4: kept open.
      watch: [
        stream(fixture('endpointslices-watch.jsonl')),
        stream(fixture('watch-expired.jsonl')),
        json('{"kind":"Status","code":410,"reason":"Gone"}', 410),
        held,
      ],
    });
    cleanups.push(() => api.close());
    const dispatcher = new Agent();
    cleanups.push(() => dispatcher.close());
    const answers: DiscoveryAnswer[] = [];
    const source = sourceOn(api.url, dispatcher, {
      api: { url: api.url, dispatcher, token: async () => 'sa-token-1' },
    });
    await source.start(async (answer) => void answers.push(answer));
    cleanups.push(() => source.stop());
    // After the first list, before any watch event.
    expect(answers.map(summary)).toEqual([['vllm@10.244.1.5:8000', 'vllm@10.244.2.7:8000', 'vllm@10.244.4.2:8000']]);
    await waitFor(() => api.requests.filter((request) => request.query.get('watch') === '1').length === 4, 5_000);

    const watches = api.requests
      .filter((request) => request.query.get('watch') === '1')
      .map((request) => request.query.get('resourceVersion'));
    // From the list; from the last event of the ended watch; after each 410 a list, then from the new list's version.
    expect(watches).toEqual(['48211', '48272', '48300', '48300']);
    expect(api.requests.filter((request) => request.query.get('watch') !== '1')).toHaveLength(4);
    expect(api.requests.every((request) => request.authorization === 'Bearer sa-token-1')).toBe(true);
    expect(api.requests.find((request) => request.query.get('watch') === '1')?.query.get('allowWatchBookmarks')).toBe(
      'true',
    );

    const steps = answers.map(summary);
    const listed = ['vllm@10.244.1.5:8000', 'vllm@10.244.2.7:8000', 'vllm@10.244.4.2:8000'];
    expect(steps).toEqual([
      listed,
      ['vllm@10.244.1.5:8000 (draining)', 'vllm@10.244.2.7:8000', 'vllm@10.244.3.9:8000', 'vllm@10.244.4.2:8000'],
      [
        'vllm@10.244.1.5:8000 (draining)',
        'vllm@10.244.2.7:8000',
        'vllm@10.244.3.9:8000',
        'vllm@10.244.4.2:8000',
        'vllm@10.244.5.1:8000',
      ],
      ['vllm@10.244.1.5:8000 (draining)', 'vllm@10.244.2.7:8000', 'vllm@10.244.3.9:8000', 'vllm@10.244.5.1:8000'],
      ['vllm@10.244.2.7:8000', 'vllm@10.244.3.9:8000', 'vllm@10.244.5.1:8000'],
      // Re-listed after the 410 event: the list is the truth again.
      listed,
      // The 410 status: listed again, which failed (500), then listed once more.
      'failed',
      listed,
    ]);
  });

  it('an API server that refuses (403: RBAC missing) is a failure, retried, never an empty set', async () => {
    const api = await startApiServer({
      list: [json('{"kind":"Status","code":403,"reason":"Forbidden"}', 403)],
      watch: [held],
    });
    cleanups.push(() => api.close());
    const dispatcher = new Agent();
    cleanups.push(() => dispatcher.close());
    const answers: DiscoveryAnswer[] = [];
    const source = sourceOn(api.url, dispatcher, { target: parseDiscoveryTarget('k8s://inference/vllm') as never });
    await source.start(async (answer) => void answers.push(answer));
    cleanups.push(() => source.stop());
    await waitFor(() => answers.length >= 3);
    expect(answers.every((answer) => answer.kind === 'failed')).toBe(true);
    expect(String((answers[0] as { error: unknown }).error)).toContain('403');
    expect(api.requests[0]?.authorization).toBeUndefined();
  });

  it('waits, longer each time, before watching again after watches that end at once (a misbehaving proxy), not after a long one', async () => {
    const list = fixture('endpointslices-list.json');
    // Every watch ends at once, without an event.
    const api = await startApiServer({ list: [json(list)], watch: [stream('')] });
    cleanups.push(() => api.close());
    const dispatcher = new Agent();
    cleanups.push(() => dispatcher.close());
    const delays: number[] = [];
    const source = sourceOn(api.url, dispatcher, {
      minWatchMs: 1_000,
      retryDelayMs: (attempt) => {
        delays.push(attempt);
        return 5 * (attempt + 1);
      },
    });
    await source.start(async () => undefined);
    cleanups.push(() => source.stop());
    await waitFor(() => api.requests.filter((request) => request.query.get('watch') === '1').length >= 4, 5_000);
    // Each quick end waited, on a growing backoff (no failure was reported: the attempts count quick ends).
    expect(delays.slice(0, 3)).toEqual([0, 1, 2]);
    const watches = api.requests.filter((request) => request.query.get('watch') === '1').length;
    expect(delays.length).toBeGreaterThanOrEqual(watches - 1);
  });

  it('a list body beyond maxListBytes is a failure (the list is read whole into memory), never parsed', async () => {
    const list = fixture('endpointslices-list.json');
    const api = await startApiServer({ list: [json(list)], watch: [held] });
    cleanups.push(() => api.close());
    const dispatcher = new Agent();
    cleanups.push(() => dispatcher.close());
    const answers: DiscoveryAnswer[] = [];
    const small = sourceOn(api.url, dispatcher, { maxListBytes: Buffer.byteLength(list) - 1 });
    await small.start(async (answer) => void answers.push(answer));
    await small.stop();
    expect(answers[0]?.kind).toBe('failed');
    expect(String((answers[0] as { error: unknown }).error)).toContain('larger than');
    // The same body within the cap is read.
    const fits: DiscoveryAnswer[] = [];
    const enough = sourceOn(api.url, dispatcher, { maxListBytes: Buffer.byteLength(list) });
    await enough.start(async (answer) => void fits.push(answer));
    await enough.stop();
    expect(fits[0]?.kind).toBe('backends');
  });
});

describe('a router following EndpointSlices', () => {
  it('routes to ready endpoints, drains a terminating one (its stream finishes), removes a deleted one', async () => {
    const sims: Array<{ sim: SimServer; port: number }> = [];
    for (let index = 0; index < 2; index++) {
      const sim = await createSimServer(
        SimConfig.parse({ port: 0, profile: 'a100-7b', model: 'test-model', logLevel: 'silent' }),
      );
      sims.push({ sim, port: Number(new URL(await sim.listen()).port) });
    }
    const [a, b] = sims as [(typeof sims)[0], (typeof sims)[0]];
    const slice = (name: string, port: number, conditions: object) => ({
      kind: 'EndpointSlice',
      apiVersion: 'discovery.k8s.io/v1',
      metadata: {
        name,
        namespace: 'inference',
        resourceVersion: String(port),
        labels: { 'kubernetes.io/service-name': 'vllm' },
      },
      addressType: 'IPv4',
      endpoints: [{ addresses: ['127.0.0.1'], conditions }],
      ports: [{ name: 'http', protocol: 'TCP', port }],
    });
    const ready = { ready: true, serving: true, terminating: false };
    let watchResponse: ServerResponse | null = null;
    const api = await startApiServer({
      list: [
        json(
          JSON.stringify({
            kind: 'EndpointSliceList',
            apiVersion: 'discovery.k8s.io/v1',
            metadata: { resourceVersion: '100' },
            items: [slice('vllm-a', a.port, ready), slice('vllm-b', b.port, ready)],
          }),
        ),
      ],
      watch: [
        (response) => {
          watchResponse = response;
          held(response);
        },
      ],
    });
    const directory = mkdtempSync(join(tmpdir(), 'kvroute-sa-'));
    writeFileSync(join(directory, 'token'), 'rotated-token\n');
    const router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        discovery: 'k8s://inference/vllm:http',
        discoveryKubernetesApiUrl: api.url,
        discoveryKubernetesTokenFile: join(directory, 'token'),
        discoveryRemoveAfterMs: 0,
        discoveryRefreshMs: 200,
        policy: 'roundrobin',
        retryBackoffMs: 1,
      }),
    );
    try {
      const url = await router.listen();
      const idA = `vllm@127.0.0.1:${a.port}`;
      const idB = `vllm@127.0.0.1:${b.port}`;
      expect(router.registry.backends.map((backend) => backend.id).sort()).toEqual([idA, idB].sort());
      await waitFor(() => router.registry.poolFor('test-model').length === 2 && watchResponse !== null);
      expect(api.requests[0]?.authorization).toBe('Bearer rotated-token');
      // A stream on A, running ~4 s.
      let streamOnA: Promise<string> | null = null;
      for (let attempt = 0; streamOnA === null && attempt < 10; attempt++) {
        const response = await fetch(`${url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            model: 'test-model',
            messages: [{ role: 'user', content: `long ${attempt}` }],
            max_tokens: 400,
            stream: true,
          }),
        });
        if (response.headers.get('x-router-backend') === idA) streamOnA = response.text();
        else void response.text();
      }
      expect(streamOnA).not.toBeNull();
      const send = (event: object) => (watchResponse as unknown as ServerResponse).write(`${JSON.stringify(event)}\n`);
      send({ type: 'MODIFIED', object: slice('vllm-a', a.port, { ready: false, serving: true, terminating: true }) });
      await waitFor(() => router.registry.isDrained(idA));
      expect(router.registry.poolFor('test-model').map((backend) => backend.id)).toEqual([idB]);
      const receivedByA = a.sim.engine.stats.requestParamsMaxTokens.count;
      for (let index = 0; index < 6; index++) {
        const response = await fetch(`${url}/v1/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            model: 'test-model',
            messages: [{ role: 'user', content: `q ${index}` }],
            max_tokens: 2,
          }),
        });
        expect(response.status).toBe(200);
        expect(response.headers.get('x-router-backend')).toBe(idB);
        await response.text();
      }
      expect(a.sim.engine.stats.requestParamsMaxTokens.count).toBe(receivedByA);
      send({ type: 'DELETED', object: slice('vllm-a', a.port, { ready: false, serving: false, terminating: true }) });
      await waitFor(() => router.registry.get(idA) === undefined);
      const text = await (streamOnA as unknown as Promise<string>);
      expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
      expect(text).not.toContain('ROUTER_ERR_');
    } finally {
      await router.close();
      await api.close();
      for (const sim of sims) await sim.sim.close();
    }
  });
});

describe('k8s discovery settings', () => {
  it('a router outside a pod, or without its service account, fails to start saying what is missing', async () => {
    await expect(
      createRouterServer(RouterConfig.parse({ host: '127.0.0.1', port: 0, opsPort: 0, discovery: 'k8s://vllm' }), {
        logger: false,
        env: {},
      }),
    ).rejects.toThrow(/KUBERNETES_SERVICE_HOST/);
    const config = RouterConfig.parse({
      host: '127.0.0.1',
      port: 0,
      opsPort: 0,
      discovery: 'k8s://vllm',
      discoveryKubernetesNamespaceFile: '/nonexistent/namespace',
    });
    await expect(
      createRouterServer(config, {
        logger: false,
        env: { KUBERNETES_SERVICE_HOST: '10.96.0.1', KUBERNETES_SERVICE_PORT: '443' },
      }),
    ).rejects.toThrow(/\/nonexistent\/namespace/);
  });
});
