import { once } from 'node:events';
import { createServer, type Server } from 'node:http';
import { type AddressInfo, connect, type Socket } from 'node:net';
import { Command } from 'proxy-protocol-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { chatRequest, exchange, statusOf, v1Header, v2Header } from './proxy-client';

/**
 * Issue 30, "real client addresses behind the balancer": PROXY protocol v1/v2 on the public listener,
 * trusted only from `proxyProtocolFrom`. Real sockets on loopback: the balancer is 127.0.0.1 (listed),
 * another host is 127.0.0.2 (not listed). The backend echoes the `X-Forwarded-For` it got, whose last
 * element is the client address the router saw.
 */

const PROXY_TIMEOUT_MS = 300;
const request = chatRequest();

describe('PROXY protocol on the public listener', () => {
  let backend: Server;
  let router: RouterServer;
  let port: number;

  beforeAll(async () => {
    backend = createServer((incoming, response) => {
      incoming.resume();
      incoming.on('end', () => {
        response.setHeader('content-type', 'application/json');
        response.end(
          JSON.stringify({
            id: 'chatcmpl-1',
            object: 'chat.completion',
            model: 'm',
            choices: [{ index: 0, message: { role: 'assistant', content: 'ok' }, finish_reason: 'stop' }],
            forwardedFor: incoming.headers['x-forwarded-for'],
          }),
        );
      });
    });
    backend.listen(0, '127.0.0.1');
    await once(backend, 'listening');
    const url = `http://127.0.0.1:${(backend.address() as AddressInfo).port}`;
    router = await createRouterServer(
      RouterConfig.parse({
        host: '0.0.0.0',
        port: 0,
        opsPort: 0,
        backends: [{ url, id: 'b0', models: ['m'] }],
        proxyProtocolFrom: ['127.0.0.1/32'],
        proxyProtocolTimeoutMs: PROXY_TIMEOUT_MS,
      }),
      { logger: false },
    );
    port = Number(new URL(await router.listen()).port);
  });

  afterAll(async () => {
    await router.close({ graceMs: 10 });
    backend.closeAllConnections();
    await new Promise((resolve) => backend.close(resolve));
  });

  it('takes the client address from a v1 header sent by the balancer', async () => {
    const answer = await exchange(port, '127.0.0.1', [Buffer.concat([v1Header('203.0.113.7', 40_000), request])]);
    expect(statusOf(answer)).toBe(200);
    expect(forwardedForIn(answer)).toBe('203.0.113.7');
  });

  it('takes the client address from a v2 header, also when the header and the request arrive apart', async () => {
    const whole = await exchange(port, '127.0.0.1', [Buffer.concat([v2Header('198.51.100.9', 1234), request])]);
    expect(forwardedForIn(whole)).toBe('198.51.100.9');
    const header = v2Header('198.51.100.10', 1234);
    // The header in two pieces, then part of the request with the header's tail, then the rest.
    const pieces = [
      header.subarray(0, 10),
      Buffer.concat([header.subarray(10), request.subarray(0, 30)]),
      request.subarray(30),
    ];
    const split = await exchange(port, '127.0.0.1', pieces);
    expect(statusOf(split)).toBe(200);
    expect(forwardedForIn(split)).toBe('198.51.100.10');
  });

  it('keeps the balancer’s own address for a v2 LOCAL header (its health checks)', async () => {
    const local = v2Header('1.2.3.4', 1, Command.LOCAL);
    const answer = await exchange(port, '127.0.0.1', [Buffer.concat([local, request])]);
    expect(forwardedForIn(answer)).toBe('127.0.0.1');
  });

  it('does not trust a PROXY header from an address that is not a listed balancer: bad HTTP, 400', async () => {
    const answer = await exchange(port, '127.0.0.2', [Buffer.concat([v1Header('203.0.113.7', 40_000), request])]);
    expect(statusOf(answer)).toBe(400);
    // Without a header, that host is served as itself.
    const plain = await exchange(port, '127.0.0.2', [request]);
    expect(statusOf(plain)).toBe(200);
    expect(forwardedForIn(plain)).toBe('127.0.0.2');
  });

  it('closes a connection from the balancer that does not start with a PROXY header, answering nothing', async () => {
    expect(await exchange(port, '127.0.0.1', [request])).toBe('');
    const metrics = await router.metrics.registry.metrics();
    expect(metrics).toMatch(/kvroute_router_client_connections_closed_total\{reason="proxy_header"\} [1-9]/);
  });

  it('closes a connection from the balancer whose header does not complete in time', async () => {
    const started = Date.now();
    const answer = await exchange(port, '127.0.0.1', [v2Header('1.2.3.4', 1).subarray(0, 14)]);
    expect(answer).toBe('');
    expect(Date.now() - started).toBeGreaterThanOrEqual(PROXY_TIMEOUT_MS - 20);
    expect(Date.now() - started).toBeLessThan(PROXY_TIMEOUT_MS + 1_500);
  });
});

/** The `X-Forwarded-For` the backend echoed (the router relays its JSON body, possibly chunked: the field is read itself). */
function forwardedForIn(answer: string): string | undefined {
  return /"forwardedFor":"([^"]*)"/.exec(answer)?.[1];
}

/**
 * Issue 30, "per-peer caps use the real client": in open mode a caller is its client address, and one
 * caller holds at most `maxInflightPerCaller` (half of maxInflightRequests by default) before its bodies
 * are read. Behind the balancer that address is the one its PROXY header names, so one client's stalled
 * requests do not spend the share of every other client behind the same balancer.
 */
describe('per-caller in-flight caps behind the balancer', () => {
  let router: RouterServer;
  let port: number;
  const sockets: Socket[] = [];

  beforeAll(async () => {
    router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: [{ url: 'http://127.0.0.1:9', id: 'b0', models: ['m'] }],
        maxInflightRequests: 4,
        requestBodyTimeoutMs: 30_000,
        proxyProtocolFrom: ['127.0.0.1'],
      }),
      { logger: false },
    );
    port = Number(new URL(await router.listen()).port);
  });

  afterAll(async () => {
    for (const socket of sockets) socket.destroy();
    await router.close({ graceMs: 10 });
  });

  /** Through the balancer for `client`: headers promising a body of 1000 bytes, of which a few are sent. */
  async function stalledFrom(client: string): Promise<Socket> {
    const socket = connect({ port, host: '127.0.0.1' });
    sockets.push(socket);
    socket.on('error', () => undefined);
    await once(socket, 'connect');
    socket.write(
      Buffer.concat([
        v2Header(client, 40_000),
        Buffer.from(
          'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"model":"m"',
        ),
      ]),
    );
    return socket;
  }

  it('counts a client’s requests by the address its PROXY header names', async () => {
    await stalledFrom('203.0.113.7');
    await stalledFrom('203.0.113.7');
    await waitUntil(() => router.inflightRequests === 2);
    // The same client's third is over its share; another client behind the same balancer is not.
    const third = await stalledFrom('203.0.113.7');
    expect(await firstAnswer(third)).toMatch(/^HTTP\/1\.1 429[\s\S]*ROUTER_ERR_CALLER_INFLIGHT/);
    const other = await stalledFrom('198.51.100.9');
    expect(await firstAnswer(other, 300)).toBe('');
    expect(router.inflightRequests).toBe(3);
  });
});

/** What `socket` receives within `ms` (empty: nothing, the request is still waiting for its body). */
function firstAnswer(socket: Socket, ms = 2_000): Promise<string> {
  return new Promise((resolve) => {
    let text = '';
    const timer = setTimeout(() => resolve(text), ms);
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString('utf8');
    });
    socket.once('close', () => {
      clearTimeout(timer);
      resolve(text);
    });
  });
}

async function waitUntil(check: () => boolean, timeoutMs = 2_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
