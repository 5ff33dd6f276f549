import { SimConfig } from '@kvroute/vllm-sim/config';
import { createSimServer, type SimServer } from '@kvroute/vllm-sim';
import OpenAI, { APIError } from 'openai';
import { connect } from 'node:net';
import { Readable } from 'node:stream';
import { request as undiciRequest } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';

/**
 * Issue 30, graceful: a body over `requestBodyLimitBytes` is answered 413 in the OpenAI shape, and the
 * client reads that answer: the router stops reading the body, answers, and closes the connection only
 * after a short drain of what the client was still sending (a lingering close). Closing at once, with the
 * client's bytes unread, resets the connection, and the client sees a connection error instead.
 */
const MIB = 1024 * 1024;

describe('a body too large', () => {
  let sim: SimServer;
  let router: RouterServer;
  let routerUrl: string;

  beforeAll(async () => {
    sim = await createSimServer(SimConfig.parse({ port: 0, profile: 'fast', model: 'test-model' }));
    const simUrl = await sim.listen();
    router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: [simUrl],
        requestBodyLimitBytes: 1 * MIB,
      }),
      { logger: false },
    );
    routerUrl = await router.listen();
  });
  afterAll(async () => {
    await router?.close();
    await sim?.close();
  });

  it('answers the official client 413 ROUTER_ERR_BODY_TOO_LARGE for a 64 MiB prompt, not a connection error', async () => {
    const client = new OpenAI({ baseURL: `${routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    const failure = await client.chat.completions
      .create({ model: 'test-model', messages: [{ role: 'user', content: 'x'.repeat(64 * MIB) }], max_tokens: 2 })
      .then(
        () => null,
        (error: unknown) => error,
      );
    expect(failure).toBeInstanceOf(APIError);
    expect((failure as APIError).status).toBe(413);
    expect((failure as APIError).code).toBe('ROUTER_ERR_BODY_TOO_LARGE');
    expect(sim.generationRequestsReceived).toBe(0);
  });

  it('lets a client that sends its whole 64 MiB body before reading (as curl, Python) read the 413', async () => {
    const { port } = new URL(routerUrl);
    const body = Buffer.alloc(64 * MIB, 'x');
    const outcome = await new Promise<{ answer: string; error: string | null }>((resolve) => {
      const socket = connect({ host: '127.0.0.1', port: Number(port) });
      let answer = '';
      let error: string | null = null;
      socket.on('data', (chunk: Buffer) => {
        answer += chunk.toString('latin1');
      });
      socket.on('error', (caught: NodeJS.ErrnoException) => {
        error = caught.code ?? caught.message;
      });
      socket.on('close', () => resolve({ answer, error }));
      socket.on('connect', () => {
        socket.write(
          'POST /v1/chat/completions HTTP/1.1\r\nhost: router\r\ncontent-type: application/json\r\n' +
            `content-length: ${body.length}\r\n\r\n`,
        );
        // The whole body, then the client's end: it reads only what arrives meanwhile and after.
        socket.end(body);
      });
    });
    expect(outcome.error).toBeNull();
    expect(outcome.answer).toMatch(/^HTTP\/1\.1 413 /);
    expect(outcome.answer).toMatch(/connection: close/i);
    expect(outcome.answer).toContain('ROUTER_ERR_BODY_TOO_LARGE');
  });

  it('answers 413 to a chunked body that grows past the limit, and closes that connection', async () => {
    async function* chunks() {
      const chunk = Buffer.alloc(256 * 1024, 'x');
      yield Buffer.from('{"model":"test-model","messages":[{"role":"user","content":"');
      for (let sent = 0; sent < 32 * MIB; sent += chunk.length) yield chunk;
      yield Buffer.from('"}]}');
    }
    const response = await undiciRequest(`${routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: Readable.from(chunks()),
    });
    expect(response.statusCode).toBe(413);
    expect(response.headers.connection).toBe('close');
    expect(((await response.body.json()) as { error: { code: string } }).error.code).toBe('ROUTER_ERR_BODY_TOO_LARGE');
  });

  it('still serves the next request', async () => {
    const client = new OpenAI({ baseURL: `${routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
    const completion = await client.chat.completions.create({
      model: 'test-model',
      messages: [{ role: 'user', content: 'hi' }],
      max_tokens: 2,
    });
    expect(completion.choices[0]?.finish_reason).toBeDefined();
  });
});
