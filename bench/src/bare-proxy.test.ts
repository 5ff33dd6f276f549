import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { request } from 'undici';
import { endToEndHeaders, startBareProxy, type BareProxy } from './bare-proxy';
import { freePort } from './local-sims';

describe('endToEndHeaders', () => {
  it('drops hop-by-hop headers and those the Connection header names', () => {
    const headers = endToEndHeaders({
      connection: 'keep-alive, X-Secret',
      'keep-alive': 'timeout=5',
      'transfer-encoding': 'chunked',
      'x-secret': '1',
      'content-type': 'text/event-stream',
      'content-length': '10',
      'x-request-id': 'abc',
    });
    expect(headers).toEqual({ 'content-type': 'text/event-stream', 'content-length': '10', 'x-request-id': 'abc' });
  });
});

describe('startBareProxy', () => {
  let upstream: Server | undefined;
  let proxy: BareProxy | undefined;

  afterEach(async () => {
    await proxy?.close();
    upstream?.closeAllConnections();
    await new Promise((resolve) => (upstream ? upstream.close(resolve) : resolve(undefined)));
    upstream = undefined;
    proxy = undefined;
  });

  async function listen(server: Server): Promise<string> {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  }

  it('forwards method, path, body and end-to-end headers, and answers with the upstream status and body', async () => {
    let seen: { method?: string; url?: string; headers?: IncomingHttpHeaders; body?: string } = {};
    upstream = createServer((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (chunk: string) => (body += chunk));
      req.on('end', () => {
        seen = { method: req.method, url: req.url, headers: req.headers, body };
        res.writeHead(201, { 'content-type': 'application/json', 'x-upstream': 'yes', 'keep-alive': 'timeout=5' });
        res.end('{"ok":true}');
      });
    });
    proxy = await startBareProxy({ upstream: await listen(upstream) });
    const response = await request(`${proxy.url}/v1/chat/completions?x=1`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-client': 'c', 'proxy-authorization': 'secret' },
      body: '{"model":"m"}',
    });
    expect(response.statusCode).toBe(201);
    expect(response.headers['x-upstream']).toBe('yes');
    expect(await response.body.text()).toBe('{"ok":true}');
    expect(seen.method).toBe('POST');
    expect(seen.url).toBe('/v1/chat/completions?x=1');
    expect(seen.body).toBe('{"model":"m"}');
    expect(seen.headers?.['x-client']).toBe('c');
    expect(seen.headers?.['content-type']).toBe('application/json');
    expect(seen.headers?.['proxy-authorization']).toBeUndefined();
  });

  it('relays a streamed response chunk by chunk, before the upstream has finished', async () => {
    let finish: () => void = () => undefined;
    upstream = createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: one\n\n');
      finish = () => res.end('data: [DONE]\n\n');
    });
    proxy = await startBareProxy({ upstream: await listen(upstream) });
    const response = await request(`${proxy.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    expect(response.headers['content-type']).toBe('text/event-stream');
    const iterator = response.body[Symbol.asyncIterator]();
    const first = await iterator.next();
    expect(String(first.value)).toBe('data: one\n\n');
    finish();
    let rest = '';
    for (let next = await iterator.next(); !next.done; next = await iterator.next()) rest += String(next.value);
    expect(rest).toBe('data: [DONE]\n\n');
  });

  it('answers 502 when the upstream cannot be reached', async () => {
    proxy = await startBareProxy({ upstream: `http://127.0.0.1:${await freePort()}` });
    const response = await request(`${proxy.url}/v1/models`);
    expect(response.statusCode).toBe(502);
    expect(((await response.body.json()) as { error: { type: string } }).error.type).toBe('bad_gateway');
  });
});
