import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestCluster, totalInflight, type TestCluster } from './start-test-cluster';

/** Acceptance 5: malformed bodies and headers get a 4xx in the OpenAI error shape, never a 500, never forwarded. */
describe('router bad input', () => {
  let cluster: TestCluster;
  beforeAll(async () => {
    cluster = await startTestCluster({ backends: 2, router: { requestBodyLimitBytes: 64 * 1024 } });
  });
  afterAll(() => cluster.close());

  const chat = '/v1/chat/completions';
  const text = '/v1/completions';
  const ok = { model: 'test-model', messages: [{ role: 'user', content: 'hi' }] };
  type Case = [name: string, path: string, body: string, status: number, headers?: Record<string, string>];
  const json = (value: unknown) => JSON.stringify(value);
  const cases: Case[] = [
    ['truncated JSON', chat, '{"model":"test-model","messages":[', 400],
    ['empty body', chat, '', 400],
    ['not JSON at all', chat, 'hello world', 400],
    ['a JSON array', chat, '[1,2,3]', 400],
    ['a JSON string', chat, '"text"', 400],
    ['JSON null', chat, 'null', 400],
    ['a JSON number', chat, '42', 400],
    // A missing (or null) model is the only served model (request-model.ts): valid here; an object is not a model.
    ['model an object', chat, json({ ...ok, model: {} }), 400],
    ['empty model', chat, json({ ...ok, model: '' }), 400],
    ['model not a string', chat, json({ ...ok, model: 7 }), 400],
    ['missing messages', chat, json({ model: 'test-model' }), 400],
    ['messages not an array', chat, json({ model: 'test-model', messages: 'hi' }), 400],
    ['empty messages', chat, json({ model: 'test-model', messages: [] }), 400],
    ['message without role', chat, json({ model: 'test-model', messages: [{ content: 'x' }] }), 400],
    // Custom roles (`ipython`) are vLLM's to judge; an empty one is no role.
    ['empty role', chat, json({ model: 'test-model', messages: [{ role: '', content: 'x' }] }), 400],
    ['content of the wrong type', chat, json({ model: 'test-model', messages: [{ role: 'user', content: 5 }] }), 400],
    [
      'content part without type',
      chat,
      json({ model: 'test-model', messages: [{ role: 'user', content: [{ text: 'x' }] }] }),
      400,
    ],
    ['max_tokens zero', chat, json({ ...ok, max_tokens: 0 }), 400],
    ['max_tokens negative', chat, json({ ...ok, max_tokens: -5 }), 400],
    ['max_tokens fractional', chat, json({ ...ok, max_tokens: 1.5 }), 400],
    ['max_tokens a string', chat, json({ ...ok, max_tokens: '10' }), 400],
    ['stream not a boolean', chat, json({ ...ok, stream: 'yes' }), 400],
    ['n zero', chat, json({ ...ok, n: 0 }), 400],
    ['tools not an array', chat, json({ ...ok, tools: {} }), 400],
    ['unknown model', chat, json({ ...ok, model: 'no-such-model' }), 404],
    ['missing prompt', text, json({ model: 'test-model' }), 400],
    ['prompt a number', text, json({ model: 'test-model', prompt: 3 }), 400],
    ['empty prompt list', text, json({ model: 'test-model', prompt: [] }), 400],
    ['mixed prompt list', text, json({ model: 'test-model', prompt: ['a', 1] }), 400],
    ['negative token id', text, json({ model: 'test-model', prompt: [1, -2] }), 400],
    ['unknown model for completions', text, json({ model: 'nope', prompt: 'x' }), 404],
    ['body over the limit', chat, json({ ...ok, messages: [{ role: 'user', content: 'x'.repeat(100_000) }] }), 413],
    ['pass-through with a model that is not a string', '/v1/embeddings', json({ model: ['x'], input: 'x' }), 400],
    ['root pass-through with an unknown model', '/tokenize', json({ model: 'nope', prompt: 'x' }), 404],
    ['root pass-through that is not JSON', '/rerank', '{"model":', 400],
    [
      'messages without max_tokens',
      '/v1/messages',
      json({ model: 'test-model', messages: [{ role: 'user', content: 'x' }] }),
      400,
    ],
    [
      'messages without model (Anthropic requires it)',
      '/v1/messages',
      json({ max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }),
      400,
    ],
    [
      'messages content a number',
      '/v1/messages',
      json({ model: 'test-model', max_tokens: 4, messages: [{ role: 'user', content: 5 }] }),
      400,
    ],
    [
      'messages block without type',
      '/v1/messages',
      json({ model: 'test-model', max_tokens: 4, messages: [{ role: 'user', content: [{ text: 'x' }] }] }),
      400,
    ],
    [
      'messages system a number',
      '/v1/messages',
      json({ model: 'test-model', max_tokens: 4, system: 3, messages: [{ role: 'user', content: 'x' }] }),
      400,
    ],
    [
      'messages for an unknown model',
      '/v1/messages',
      json({ model: 'nope', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }),
      404,
    ],
    ['multipart without a boundary', '/v1/audio/transcriptions', 'x', 400, { 'content-type': 'multipart/form-data' }],
    [
      'multipart that never closes its part',
      '/v1/audio/transcriptions',
      '--b\r\nContent-Disposition: form-data; name="model"\r\n\r\ntest-model',
      400,
      { 'content-type': 'multipart/form-data; boundary=b' },
    ],
    [
      'multipart to a JSON endpoint',
      chat,
      '--b\r\nContent-Disposition: form-data; name="model"\r\n\r\ntest-model\r\n--b--\r\n',
      400,
      { 'content-type': 'multipart/form-data; boundary=b' },
    ],
    [
      'multipart with an unknown model',
      '/v1/audio/translations',
      '--b\r\nContent-Disposition: form-data; name="model"\r\n\r\nnope\r\n--b--\r\n',
      404,
      { 'content-type': 'multipart/form-data; boundary=b' },
    ],
    ['pass-through with an unknown model', '/v1/embeddings', json({ model: 'nope', input: 'x' }), 404],
    ['a path that does not exist', '/v2/chat', json(ok), 404],
    ['an XML body sent as XML', chat, '<request model="test-model"/>', 400, { 'content-type': 'application/xml' }],
    ['a form body', chat, 'model=test-model&prompt=x', 400, { 'content-type': 'application/x-www-form-urlencoded' }],
    ['a JSON body with a BOM and garbage', chat, '\ufeff{"model":', 400],
  ];

  it.each(cases)('rejects %s', async (_name, path, body, status, headers) => {
    const response = await rawPost(cluster.routerUrl, path, body, headers);
    expect(response.status).toBe(status);
    const parsed = JSON.parse(response.body) as { error: { message: string; type: string; code: string } };
    expect(typeof parsed.error.message).toBe('string');
    expect(parsed.error.message.length).toBeGreaterThan(0);
    expect(typeof parsed.error.type).toBe('string');
    expect(parsed.error.code).toMatch(/^ROUTER_ERR_/);
  });

  it('has at least 30 cases, forwarded none of them, and leaked no in-flight slot', async () => {
    expect(cases.length).toBeGreaterThanOrEqual(30);
    for (const sim of cluster.sims) expect(sim.sim.engine.stats.prefixQueryTokens).toBe(0);
    expect(totalInflight(cluster.router)).toBe(0);
  });
});

/** A raw HTTP/1.1 request, so malformed framing reaches the server as sent. */
async function rawPost(
  baseUrl: string,
  path: string,
  body: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; body: string }> {
  const { request } = await import('node:http');
  const url = new URL(path, baseUrl);
  return new Promise((resolve, reject) => {
    const outgoing = request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: 'POST',
        headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)), ...headers },
      },
      (incoming) => {
        let text = '';
        incoming.setEncoding('utf8');
        incoming.on('data', (chunk: string) => (text += chunk));
        incoming.on('end', () => resolve({ status: incoming.statusCode ?? 0, body: text }));
      },
    );
    outgoing.on('error', reject);
    outgoing.end(body);
  });
}
