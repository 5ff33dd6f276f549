import { Writable } from 'node:stream';
import { createLogger } from '@kvroute/platform';
import { findFreePort, startLoopbackServer, type LoopbackServer } from '@kvroute/testing';
import OpenAI, { APIError } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RouterConfig } from '../src/config';
import { createRouterServer, type RouterServer } from '../src/create-router';
import { LOGGED_BYTES } from '../src/proxy/upstream-error-answer';

/**
 * Issue 30, guards: an engine's 5xx body (a Python traceback) is the operator's, not the client's. The
 * client gets the engine's status with an OpenAI-shaped error that names no backend; the log gets the
 * start of the original. A 502 of the router's own (backend unreachable) names no backend either.
 */
const TRACEBACK = [
  'Traceback (most recent call last):',
  '  File "/usr/local/lib/python3.12/site-packages/vllm/entrypoints/openai/serving_chat.py", line 412, in create_chat_completion',
  '    raise RuntimeError("CUDA error: an illegal memory access was encountered")',
  `RuntimeError: CUDA error: an illegal memory access was encountered${' padding'.repeat(400)}`,
].join('\n');

describe('upstream 5xx answers', () => {
  let engine: LoopbackServer;
  let router: RouterServer;
  let routerUrl: string;
  let deadPort: number;
  let answer: { status: number; headers: Record<string, string>; body: string } = {
    status: 500,
    headers: {},
    body: '',
  };
  const logLines: string[] = [];

  beforeAll(async () => {
    engine = await startLoopbackServer((request, response) => {
      request.resume();
      request.on('end', () => {
        response.writeHead(answer.status, { 'content-type': 'text/plain', ...answer.headers });
        response.end(answer.body);
      });
    });
    deadPort = await findFreePort();
    const sink = new Writable({
      write(chunk, _encoding, done) {
        logLines.push(String(chunk));
        done();
      },
    });
    router = await createRouterServer(
      RouterConfig.parse({
        host: '127.0.0.1',
        port: 0,
        opsPort: 0,
        backends: [
          { url: engine.url, id: 'engine-secret-id', models: ['m'] },
          { url: `http://127.0.0.1:${deadPort}`, id: 'dead-secret-id', models: ['dead'] },
        ],
      }),
      { logger: createLogger({ service: 'kvroute-router', level: 'info', destination: sink as never }) },
    );
    routerUrl = await router.listen();
  });
  afterAll(async () => {
    await router?.close();
    await engine?.close();
  });

  const client = () => new OpenAI({ baseURL: `${routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
  const failureOf = async (model: string): Promise<APIError> => {
    const error = await client()
      .chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 })
      .then(
        () => null,
        (caught: unknown) => caught,
      );
    expect(error).toBeInstanceOf(APIError);
    return error as APIError;
  };

  it("replaces an engine's 500 traceback with an OpenAI error of the same status, and logs the original truncated", async () => {
    answer = { status: 500, headers: {}, body: TRACEBACK };
    const error = await failureOf('m');
    expect(error.status).toBe(500);
    expect(error.code).toBe('ROUTER_ERR_UPSTREAM_ERROR');
    expect(error.error).toMatchObject({ type: 'upstream_error', param: null });
    const shown = JSON.stringify(error.error) + error.message;
    for (const leak of ['Traceback', 'site-packages', 'CUDA', 'engine-secret-id', '127.0.0.1'])
      expect(shown).not.toContain(leak);
    const logged = logLines
      .map((line) => JSON.parse(line) as Record<string, unknown>)
      .find((line) => line.msg === 'upstream error answer replaced');
    expect(logged).toMatchObject({ status: 500, backend: 'engine-secret-id', truncated: true });
    expect(String(logged?.upstreamError)).toMatch(/^Traceback \(most recent call last\)/);
    expect(Buffer.byteLength(String(logged?.upstreamError))).toBeLessThanOrEqual(LOGGED_BYTES);
    expect(logged?.upstreamErrorBytes).toBe(Buffer.byteLength(TRACEBACK));
  });

  it("keeps a 503's status and Retry-After, and relays a 4xx as the engine sent it", async () => {
    answer = { status: 503, headers: { 'retry-after': '7' }, body: '<html>nginx upstream overloaded</html>' };
    const response = await fetch(`${routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 }),
    });
    expect(response.status).toBe(503);
    expect(response.headers.get('retry-after')).toBe('7');
    expect(response.headers.get('content-type')).toBe('application/json');
    expect(((await response.json()) as { error: { code: string } }).error.code).toBe('ROUTER_ERR_UPSTREAM_ERROR');

    const contextTooLong = JSON.stringify({ error: { message: 'maximum context length is 4096', code: 400 } });
    answer = { status: 400, headers: { 'content-type': 'application/json' }, body: contextTooLong };
    const error = await failureOf('m');
    expect(error.status).toBe(400);
    expect(error.message).toContain('maximum context length is 4096');
  });

  it('names no backend in the 502 for a backend that cannot be reached', async () => {
    const error = await failureOf('dead');
    expect(error.status).toBe(502);
    expect(error.code).toBe('ROUTER_ERR_UPSTREAM_UNAVAILABLE');
    expect(error.message).not.toContain('dead-secret-id');
    expect(error.message).not.toContain(String(deadPort));
  });
});
