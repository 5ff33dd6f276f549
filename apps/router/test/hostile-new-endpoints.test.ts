import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestCluster, totalInflight, waitFor, type TestCluster } from './start-test-cluster';

/**
 * Hostile input on the newer request paths (Responses, Anthropic Messages, pass-through, multipart,
 * `GET /v1/models/{id}`): every bad request gets a 4xx in the OpenAI error shape, never a 5xx, a crash or
 * a hang, and leaves no lease behind. Real sims on loopback, raw HTTP/1.1 so bodies and framing reach the
 * router exactly as written. Cases that are valid (the engine's to judge) are marked as forwarded: those
 * must not be a 5xx of the router's own making.
 */

const MODEL = 'test-model';
const BODY_LIMIT = 4 * 1024 * 1024;
const MULTIPART_LIMIT = 64 * 1024;
const BODY_TIMEOUT_MS = 1_000;

interface RawAnswer {
  readonly status: number;
  readonly body: string;
  readonly headers: Record<string, string>;
}

/**
 * One request written as raw bytes on a fresh connection; the answer read until the server ends it or a
 * complete response has arrived (Content-Length). A router that never answers fails the test's timeout.
 */
function raw(baseUrl: string, head: string, body: Buffer | string = ''): Promise<RawAnswer> {
  const url = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: url.hostname, port: Number(url.port) });
    const chunks: Buffer[] = [];
    const done = (): void => {
      const text = Buffer.concat(chunks).toString('utf8');
      const split = text.indexOf('\r\n\r\n');
      if (split === -1) return reject(new Error(`no HTTP answer: ${JSON.stringify(text.slice(0, 200))}`));
      const [statusLine = '', ...lines] = text.slice(0, split).split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of lines) {
        const colon = line.indexOf(':');
        headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
      }
      resolve({ status: Number(statusLine.split(' ')[1]), body: text.slice(split + 4), headers });
    };
    socket.on('data', (chunk: Buffer) => {
      chunks.push(chunk);
      // A complete response with a Content-Length: done, even if the connection stays open.
      const text = Buffer.concat(chunks).toString('latin1');
      const split = text.indexOf('\r\n\r\n');
      const length = /\r\ncontent-length:\s*(\d+)/i.exec(text.slice(0, split));
      if (split !== -1 && length !== null && text.length - split - 4 >= Number(length[1])) {
        socket.destroy();
        done();
      }
    });
    socket.on('end', done);
    socket.on('error', (error) => (chunks.length > 0 ? done() : reject(error)));
    // Not half-closed (`end`): a client that has sent its request still waits for the answer.
    socket.write(head);
    socket.write(body);
  });
}

function post(
  baseUrl: string,
  path: string,
  body: Buffer | string,
  headers: Record<string, string> = {},
): Promise<RawAnswer> {
  const bytes = typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
  const all: Record<string, string> = {
    host: 'router',
    'content-type': 'application/json',
    'content-length': String(bytes.length),
    connection: 'close',
    ...headers,
  };
  const head = `POST ${path} HTTP/1.1\r\n${Object.entries(all)
    .map(([name, value]) => `${name}: ${value}`)
    .join('\r\n')}\r\n\r\n`;
  return raw(baseUrl, head, bytes);
}

function request(baseUrl: string, method: string, path: string): Promise<RawAnswer> {
  return raw(baseUrl, `${method} ${path} HTTP/1.1\r\nhost: router\r\nconnection: close\r\n\r\n`);
}

/** A 4xx (`status` when given) in the OpenAI error shape, with one of the router's codes. */
function expectRouterError(answer: RawAnswer, status?: number): void {
  if (status === undefined) {
    expect(answer.status).toBeGreaterThanOrEqual(400);
    expect(answer.status).toBeLessThan(500);
  } else expect(answer.status).toBe(status);
  const parsed = JSON.parse(answer.body) as {
    error: { message: unknown; type: unknown; param: unknown; code: unknown };
  };
  expect(typeof parsed.error.message).toBe('string');
  expect((parsed.error.message as string).length).toBeGreaterThan(0);
  // Bounded: a message never echoes a hostile megabyte back.
  expect((parsed.error.message as string).length).toBeLessThan(4096);
  expect(typeof parsed.error.type).toBe('string');
  expect(Object.hasOwn(parsed.error, 'param')).toBe(true);
  expect(parsed.error.code).toMatch(/^ROUTER_ERR_/);
}

const json = (value: unknown): string => JSON.stringify(value);
/** `count` copies of `item`, as JSON, without building the array (100k entries). */
const many = (item: string, count: number): string => `[${Array.from({ length: count }, () => item).join(',')}]`;
const nested = (depth: number): string => '['.repeat(depth) + ']'.repeat(depth);

type Case = readonly [name: string, body: string, status: number | 'forwarded'];

let cluster: TestCluster;
beforeAll(async () => {
  cluster = await startTestCluster({
    backends: 2,
    router: {
      requestBodyLimitBytes: BODY_LIMIT,
      multipartBodyLimitBytes: MULTIPART_LIMIT,
      requestBodyTimeoutMs: BODY_TIMEOUT_MS,
    },
  });
});
afterAll(() => cluster.close());

/** Sent to a backend (not refused by the router), whose answer, whatever it is, is no 5xx. */
function expectForwarded(answer: RawAnswer): void {
  expect(answer.status, answer.body).toBeLessThan(500);
  expect(
    cluster.sims.map((sim) => sim.id),
    answer.body,
  ).toContain(answer.headers['x-router-backend']);
}

/** Runs a table of bodies against one path: refused with their status, or forwarded and not a 5xx. */
function runTable(path: string, cases: readonly Case[]): void {
  it.each(cases)('%s', async (_name, body, status) => {
    const answer = await post(cluster.routerUrl, path, body);
    if (status === 'forwarded') expectForwarded(answer);
    else expectRouterError(answer, status);
    await waitFor(() => totalInflight(cluster.router) === 0);
  });
}

describe('POST /v1/responses, hostile bodies', () => {
  const ok = { model: MODEL, input: 'hi', max_output_tokens: 4 };
  runTable('/v1/responses', [
    ['input a number', json({ ...ok, input: 5 }), 400],
    ['input an object', json({ ...ok, input: { role: 'user', content: 'x' } }), 400],
    ['input null', json({ ...ok, input: null }), 400],
    ['input missing', json({ model: MODEL }), 400],
    ['input deeply nested arrays (past maxJsonDepth)', json({ ...ok, input: JSON.parse(nested(200)) as unknown }), 400],
    ['input items that are numbers', json({ ...ok, input: [1, 2, 3] }), 400],
    ['input items that are arrays', json({ ...ok, input: [['x']] }), 400],
    ['input item content a number', json({ ...ok, input: [{ role: 'user', content: 5 }] }), 400],
    ['input item content part without type', json({ ...ok, input: [{ role: 'user', content: [{ text: 'x' }] }] }), 400],
    ['input item role a number', json({ ...ok, input: [{ role: 7, content: 'x' }] }), 400],
    ['input item type a number', json({ ...ok, input: [{ type: 3, content: 'x' }] }), 400],
    ['100k input items', `{"model":"${MODEL}","input":${many('{"role":"user","content":"x"}', 100_000)}}`, 400],
    [
      '100k content parts in one item',
      `{"model":"${MODEL}","input":[{"role":"user","content":${many('{"type":"input_text","text":"x"}', 100_000)}}]}`,
      400,
    ],
    ['instructions an array', json({ ...ok, instructions: ['be brief'] }), 400],
    ['instructions a number', json({ ...ok, instructions: 1 }), 400],
    ['tools an object', json({ ...ok, tools: { type: 'function' } }), 400],
    ['tool item without type', json({ ...ok, tools: [{ name: 'x' }] }), 400],
    ['100k tools', `{"model":"${MODEL}","input":"x","tools":${many('{"type":"function","name":"f"}', 100_000)}}`, 400],
    ['previous_response_id a number', json({ ...ok, previous_response_id: 5 }), 400],
    ['previous_response_id empty', json({ ...ok, previous_response_id: '' }), 400],
    ['previous_response_id 10 KB', json({ ...ok, previous_response_id: 'r'.repeat(10_240) }), 400],
    ['previous_response_id with slashes', json({ ...ok, previous_response_id: 'resp/../../admin' }), 400],
    ['previous_response_id a dot-dot', json({ ...ok, previous_response_id: '..' }), 'forwarded'],
    ['previous_response_id unicode', json({ ...ok, previous_response_id: 'résp_é' }), 400],
    [
      'previous_response_id a lone surrogate',
      '{"model":"test-model","input":"x","previous_response_id":"resp_\\ud800"}',
      400,
    ],
    ['stream a string', json({ ...ok, stream: 'true' }), 400],
    ['store a string', json({ ...ok, store: 'no' }), 400],
    ['max_output_tokens negative', json({ ...ok, max_output_tokens: -1 }), 400],
    ['max_output_tokens a float', json({ ...ok, max_output_tokens: 1.5 }), 400],
    ['max_output_tokens huge', json({ ...ok, max_output_tokens: 1e300 }), 400],
    ['model a number', json({ ...ok, model: 1 }), 400],
    ['model unknown', json({ ...ok, model: 'no-such-model' }), 404],
    ['cache_salt empty', json({ ...ok, cache_salt: '' }), 400],
    ['user a number', json({ ...ok, user: 1 }), 400],
    ['a JSON array', '[1]', 400],
    ['JSON null', 'null', 400],
    ['truncated JSON', '{"model":"test-model","input":[', 400],
    [
      '__proto__ carrying an unvalidated previous_response_id',
      '{"model":"test-model","input":"x","max_output_tokens":4,"__proto__":{"previous_response_id":"../x"}}',
      'forwarded',
    ],
    [
      'constructor and prototype keys',
      '{"model":"test-model","input":"x","max_output_tokens":4,"constructor":{"prototype":{"polluted":true}}}',
      'forwarded',
    ],
    [
      'invalid UTF-8 in a string',
      Buffer.concat([
        Buffer.from('{"model":"test-model","max_output_tokens":4,"input":"'),
        Buffer.from([0xff, 0xfe, 0xc3]),
        Buffer.from('"}'),
      ]).toString('latin1'),
      'forwarded',
    ],
    ['a lone surrogate in input', '{"model":"test-model","max_output_tokens":4,"input":"a\\udc00b"}', 'forwarded'],
    // Parsed and validated in full, then refused: what a megabyte costs the router (not the sim's prefill of it).
    [
      'a 1M-character input string beside a bad field',
      json({ ...ok, input: 'x'.repeat(1_000_000), stream: 'yes' }),
      400,
    ],
    ['1M-character instructions of the wrong type', json({ ...ok, instructions: ['x'.repeat(1_000_000)] }), 400],
    ['a custom role', json({ ...ok, input: [{ role: 'ipython', content: 'x' }] }), 'forwarded'],
    [
      'an item of an unknown type',
      json({ ...ok, input: [{ type: 'mystery_item', payload: { a: [1, 2] } }] }),
      'forwarded',
    ],
    ['no model (the only served model)', json({ input: 'x', max_output_tokens: 4 }), 'forwarded'],
  ]);

  it('answers with nothing polluted: a later request still validates normally', async () => {
    const answer = await post(cluster.routerUrl, '/v1/responses', json({ ...ok, stream: 'yes' }));
    expectRouterError(answer, 400);
    expect(({} as Record<string, unknown>).polluted).toBeUndefined();
  });
});

describe('GET|DELETE /v1/responses/{id} and POST /v1/responses/{id}/cancel, hostile ids', () => {
  const ids: ReadonlyArray<readonly [name: string, id: string, status: number]> = [
    ['an unknown id', 'resp_unknown', 404],
    ['an encoded slash', 'resp%2F..%2Fadmin', 400],
    ['a dot-dot segment', '..', 400],
    ['a 10 KB id', 'r'.repeat(10_240), 400],
    ['a 129-character id', 'r'.repeat(129), 400],
    ['a unicode id', encodeURIComponent('résp_☃'), 400],
    ['an encoded NUL', 'resp%00x', 400],
    ['an encoded quote and space', 'resp%22%20x', 400],
    ['a bad percent escape', 'resp%ZZ', 400],
    ['an encoded lone surrogate', 'resp%ED%A0%80', 400],
  ];
  for (const method of ['GET', 'DELETE'] as const) {
    it.each(ids)(`${method} with %s`, async (_name, id, status) => {
      expectRouterError(await request(cluster.routerUrl, method, `/v1/responses/${id}`), status);
    });
  }
  it.each(ids)('POST …/cancel with %s', async (_name, id, status) => {
    // An id too long to be a path parameter is not matched as one: 404 for the path (never passed through).
    const tooLong = id.length > 128 && !id.includes('%');
    expectRouterError(await post(cluster.routerUrl, `/v1/responses/${id}/cancel`, '{}'), tooLong ? 404 : status);
  });

  it('POST under /v1/responses/ with extra segments is not passed through to a backend', async () => {
    const answer = await post(cluster.routerUrl, '/v1/responses/resp_a/b/cancel', json({ model: MODEL }));
    expectRouterError(answer, 404);
    expect(answer.headers['x-router-backend']).toBe('none');
  });

  it('a cancel with an empty body is no body, even with a JSON content type (curl -X POST -H …); one that is not JSON is refused, never a 5xx', async () => {
    // Takes no body: the unknown id is what is answered (404 from the owner map), not the empty body.
    const empty = await post(cluster.routerUrl, '/v1/responses/resp_unknown/cancel', '');
    expectRouterError(empty, 404);
    expect((JSON.parse(empty.body) as { error: { code: string } }).error.code).toBe('ROUTER_ERR_RESPONSE_NOT_FOUND');
    expectRouterError(await post(cluster.routerUrl, '/v1/responses/resp_unknown/cancel', '{"a":', {}), 400);
    // A generation route still wants its body.
    const generation = await post(cluster.routerUrl, '/v1/responses', '');
    expectRouterError(generation, 400);
    expect((JSON.parse(generation.body) as { error: { code: string } }).error.code).toBe('ROUTER_ERR_INVALID_JSON');
    expect(totalInflight(cluster.router)).toBe(0);
  });
});

describe('POST /v1/messages (Anthropic), hostile bodies', () => {
  const ok = { model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'hi' }] };
  runTable('/v1/messages', [
    ['system a number', json({ ...ok, system: 3 }), 400],
    ['system an object', json({ ...ok, system: { text: 'x' } }), 400],
    ['system block without type', json({ ...ok, system: [{ text: 'x' }] }), 400],
    ['system block text a number', json({ ...ok, system: [{ type: 'text', text: 1 }] }), 400],
    ['messages empty', json({ ...ok, messages: [] }), 400],
    ['messages an object', json({ ...ok, messages: { role: 'user', content: 'x' } }), 400],
    ['messages missing', json({ model: MODEL, max_tokens: 4 }), 400],
    ['message role empty', json({ ...ok, messages: [{ role: '', content: 'x' }] }), 400],
    ['message role a number', json({ ...ok, messages: [{ role: 1, content: 'x' }] }), 400],
    ['message content null', json({ ...ok, messages: [{ role: 'user', content: null }] }), 400],
    [
      'message content an object',
      json({ ...ok, messages: [{ role: 'user', content: { type: 'text', text: 'x' } }] }),
      400,
    ],
    [
      '100k messages',
      `{"model":"${MODEL}","max_tokens":4,"messages":${many('{"role":"user","content":"x"}', 100_000)}}`,
      400,
    ],
    [
      '100k content blocks',
      `{"model":"${MODEL}","max_tokens":4,"messages":[{"role":"user","content":${many('{"type":"text","text":"x"}', 100_000)}}]}`,
      400,
    ],
    [
      '100k system blocks',
      `{"model":"${MODEL}","max_tokens":4,"system":${many('{"type":"text","text":"x"}', 100_000)},"messages":[{"role":"user","content":"x"}]}`,
      400,
    ],
    [
      '100k stop_sequences',
      `{"model":"${MODEL}","max_tokens":4,"stop_sequences":${many('"x"', 100_000)},"messages":[{"role":"user","content":"x"}]}`,
      400,
    ],
    [
      '100k tools',
      `{"model":"${MODEL}","max_tokens":4,"tools":${many('{"name":"f"}', 100_000)},"messages":[{"role":"user","content":"x"}]}`,
      400,
    ],
    ['tools an object', json({ ...ok, tools: { name: 'f' } }), 400],
    ['tool without name', json({ ...ok, tools: [{ input_schema: {} }] }), 400],
    ['max_tokens negative', json({ ...ok, max_tokens: -1 }), 400],
    ['max_tokens zero', json({ ...ok, max_tokens: 0 }), 400],
    ['max_tokens a float', json({ ...ok, max_tokens: 2.5 }), 400],
    ['max_tokens huge', json({ ...ok, max_tokens: 1e300 }), 400],
    ['max_tokens a string', json({ ...ok, max_tokens: '4' }), 400],
    ['stream a string', json({ ...ok, stream: 'true' }), 400],
    ['metadata a string', json({ ...ok, metadata: 'u' }), 400],
    ['metadata.user_id a number', json({ ...ok, metadata: { user_id: 1 } }), 400],
    ['cache_salt with a slash', json({ ...ok, cache_salt: 'a/b' }), 400],
    ['model missing', json({ max_tokens: 4, messages: ok.messages }), 400],
    ['model unknown', json({ ...ok, model: 'nope' }), 404],
    [
      'deep nesting inside a tool schema',
      `{"model":"${MODEL}","max_tokens":4,"tools":[{"name":"f","input_schema":${nested(500)}}],"messages":[{"role":"user","content":"x"}]}`,
      400,
    ],
    [
      '__proto__ in a message',
      '{"model":"test-model","max_tokens":4,"messages":[{"role":"user","content":"x","__proto__":{"role":""}}]}',
      'forwarded',
    ],
    [
      'content blocks of unknown types',
      json({
        ...ok,
        messages: [
          {
            role: 'user',
            content: [
              { type: 'hologram', data: 1 },
              { type: 'text', text: 'x' },
            ],
          },
        ],
      }),
      'forwarded',
    ],
    ['a custom role', json({ ...ok, messages: [{ role: 'ctx', content: 'x' }] }), 'forwarded'],
    [
      'a lone surrogate in text',
      '{"model":"test-model","max_tokens":4,"messages":[{"role":"user","content":"\\ud800"}]}',
      'forwarded',
    ],
  ]);
});

describe('pass-through endpoints, hostile bodies and framing', () => {
  const paths = [
    '/tokenize',
    '/detokenize',
    '/pooling',
    '/classify',
    '/score',
    '/rerank',
    '/v2/rerank',
    '/v1/embeddings',
    '/v1/made-up',
  ];
  const cases: ReadonlyArray<readonly [name: string, body: string, headers: Record<string, string>]> = [
    ['an empty body', '', {}],
    ['a JSON array', '[1,2]', {}],
    ['a JSON string', '"x"', {}],
    ['text/plain that is not JSON', 'hello', { 'content-type': 'text/plain' }],
    ['an octet stream', '\u0000\u0001\u0002', { 'content-type': 'application/octet-stream' }],
    ['no content type, not JSON', 'model=x', { 'content-type': '' }],
    ['model a number', json({ model: 1 }), {}],
    ['model an unknown one', json({ model: 'nope' }), {}],
    ['nesting past maxJsonDepth', `{"model":"test-model","input":${nested(200)}}`, {}],
  ];
  for (const path of paths) {
    it.each(cases)(`${path}: %s`, async (_name, body, headers) => {
      const all =
        headers['content-type'] === ''
          ? Object.fromEntries(Object.entries(headers).filter(([name]) => name !== 'content-type'))
          : headers;
      expectRouterError(await post(cluster.routerUrl, path, body, all));
      await waitFor(() => totalInflight(cluster.router) === 0);
    });
  }

  it('a Content-Length longer than the body sent is cut by the body timeout (408), not left hanging', async () => {
    const url = new URL(cluster.routerUrl);
    const answer = await raw(
      url.href,
      `POST /tokenize HTTP/1.1\r\nhost: router\r\ncontent-type: application/json\r\ncontent-length: 1000\r\n\r\n`,
      '{"model":"test-model"',
    );
    expect([400, 408]).toContain(answer.status);
    await waitFor(() => totalInflight(cluster.router) === 0);
  });

  it('a Content-Length shorter than the body: the rest is not a second request the router trips on', async () => {
    const body = json({ model: MODEL, prompt: 'x' });
    const head = `POST /tokenize HTTP/1.1\r\nhost: router\r\ncontent-type: application/json\r\ncontent-length: ${body.length - 3}\r\nconnection: close\r\n\r\n`;
    const answer = await raw(cluster.routerUrl, head, body);
    expectRouterError(answer, 400);
    await waitFor(() => totalInflight(cluster.router) === 0);
  });

  it('Content-Length together with Transfer-Encoding is refused as bad framing', async () => {
    const head = `POST /tokenize HTTP/1.1\r\nhost: router\r\ncontent-type: application/json\r\ncontent-length: 4\r\ntransfer-encoding: chunked\r\n\r\n`;
    const answer = await raw(cluster.routerUrl, head, '0\r\n\r\n');
    expect(answer.status).toBe(400);
  });
});

describe('multipart /v1/audio/*, hostile forms', () => {
  const form = (parts: string, boundary = 'b'): string => `${parts}--${boundary}--\r\n`;
  const field = (name: string, value: string, boundary = 'b'): string =>
    `--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`;
  const file = (bytes: string, boundary = 'b'): string =>
    `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n${bytes}\r\n`;
  const cases: ReadonlyArray<readonly [name: string, body: string, contentType: string, status: number | 'forwarded']> =
    [
      ['no boundary parameter', form(field('model', MODEL)), 'multipart/form-data', 400],
      ['an empty boundary', form(field('model', MODEL)), 'multipart/form-data; boundary=', 400],
      ['a boundary the body does not use', form(field('model', MODEL)), 'multipart/form-data; boundary=zzz', 400],
      ['a truncated body', field('model', MODEL).slice(0, -6), 'multipart/form-data; boundary=b', 400],
      ['an empty body', '', 'multipart/form-data; boundary=b', 400],
      [
        'part headers that never end',
        `--b\r\nContent-Disposition: form-data; name="model"${'x'.repeat(9_000)}`,
        'multipart/form-data; boundary=b',
        400,
      ],
      ['a model field of 4 KB', form(field('model', 'm'.repeat(4096))), 'multipart/form-data; boundary=b', 400],
      ['an unknown model', form(field('model', 'nope') + file('RIFF')), 'multipart/form-data; boundary=b', 404],
      [
        '100 parts before the model',
        form(Array.from({ length: 100 }, (_, index) => field(`f${index}`, 'x')).join('') + field('model', MODEL)),
        'multipart/form-data; boundary=b',
        400,
      ],
      ['no model field (the only served model)', form(file('RIFF')), 'multipart/form-data; boundary=b', 'forwarded'],
      [
        'a body over multipartBodyLimitBytes',
        form(field('model', MODEL) + file('x'.repeat(MULTIPART_LIMIT + 1024))),
        'multipart/form-data; boundary=b',
        413,
      ],
    ];
  it.each(cases)('%s', async (_name, body, contentType, status) => {
    const answer = await post(cluster.routerUrl, '/v1/audio/transcriptions', body, { 'content-type': contentType });
    if (status === 'forwarded') expectForwarded(answer);
    else expectRouterError(answer, status);
    await waitFor(() => totalInflight(cluster.router) === 0);
  });

  it('multipart sent to the JSON endpoints is refused', async () => {
    for (const path of ['/v1/responses', '/v1/messages']) {
      expectRouterError(
        await post(cluster.routerUrl, path, form(field('model', MODEL)), {
          'content-type': 'multipart/form-data; boundary=b',
        }),
        400,
      );
    }
  });
});

describe('GET /v1/models/{id}, hostile ids', () => {
  it.each([
    // `/v1/models/` is `/v1/models` (one trailing slash is dropped before routing: http/canonical-path.ts); two are an empty segment.
    ['an empty id', '/v1/models//', 400],
    ['a 10 KB id', `/v1/models/${'m'.repeat(10_240)}`, 404],
    ['a unicode id', `/v1/models/${encodeURIComponent('modèle☃')}`, 404],
    ['an encoded slash', '/v1/models/a%2Fb', 400],
    ['a dot-dot segment', '/v1/models/../admin', 400],
    ['a bad percent escape', '/v1/models/%ZZ', 400],
    ['an encoded lone surrogate', '/v1/models/%ED%A0%80', 400],
  ] as const)('%s', async (_name, path, status) => {
    expectRouterError(await request(cluster.routerUrl, 'GET', path), status);
  });

  it('a response id of 128 characters (the longest valid) reaches the owner lookup: 404, not refused by the path router', async () => {
    expectRouterError(await request(cluster.routerUrl, 'GET', `/v1/responses/${'r'.repeat(128)}`), 404);
  });

  it('a served model is found', async () => {
    const answer = await request(cluster.routerUrl, 'GET', `/v1/models/${MODEL}`);
    expect(answer.status).toBe(200);
  });
});

describe('clients that leave early, on the new paths', () => {
  for (const [path, body] of [
    ['/v1/responses', json({ model: MODEL, input: 'hello there', max_output_tokens: 64, stream: true })],
    [
      '/v1/messages',
      json({ model: MODEL, max_tokens: 64, stream: true, messages: [{ role: 'user', content: 'hello there' }] }),
    ],
    ['/tokenize', json({ model: MODEL, prompt: 'hello there' })],
  ] as const) {
    it(`${path}: a client that disconnects mid-upload leaves no lease`, async () => {
      const url = new URL(cluster.routerUrl);
      const socket = net.connect({ host: url.hostname, port: Number(url.port) });
      await new Promise((resolve) => socket.once('connect', resolve));
      socket.write(
        `POST ${path} HTTP/1.1\r\nhost: router\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body.slice(0, 10)}`,
      );
      await new Promise((resolve) => setTimeout(resolve, 50));
      socket.destroy();
      await waitFor(() => totalInflight(cluster.router) === 0);
    });

    it(`${path}: a client that disconnects right after sending leaves no lease and no upstream request`, async () => {
      const url = new URL(cluster.routerUrl);
      for (let attempt = 0; attempt < 5; attempt++) {
        const socket = net.connect({ host: url.hostname, port: Number(url.port) });
        await new Promise((resolve) => socket.once('connect', resolve));
        socket.end(
          `POST ${path} HTTP/1.1\r\nhost: router\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n\r\n${body}`,
        );
        socket.destroy();
      }
      await waitFor(() => totalInflight(cluster.router) === 0);
      await waitFor(() =>
        cluster.sims.every((sim) => sim.sim.engine.runningCount === 0 && sim.sim.engine.waitingCount === 0),
      );
    });
  }
});
