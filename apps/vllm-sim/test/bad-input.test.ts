import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { postJson, startTestSim, tokenPrompt, type TestSim } from './start-test-sim';

/** Bad input gets vLLM's error JSON with a 4xx status; the server keeps serving. */
describe('vllm-sim bad input', () => {
  let sim: TestSim;
  beforeAll(async () => {
    sim = await startTestSim({ profile: 'fast', maxModelLen: 4096, bodyLimitBytes: 64 * 1024 });
  });
  afterAll(() => sim.close());

  const cases: Array<[string, string, unknown, number, string]> = [
    ['invalid JSON', '/v1/chat/completions', '{"model": "test-model", "messages": [', 400, 'BadRequestError'],
    ['a JSON array body', '/v1/chat/completions', '[1,2]', 400, 'BadRequestError'],
    ['missing messages', '/v1/chat/completions', { model: 'test-model' }, 400, 'BadRequestError'],
    // A missing model is the served one (vLLM); a model that is no string is refused.
    [
      'a model that is not a string',
      '/v1/chat/completions',
      { model: 3, messages: [{ role: 'user', content: 'x' }] },
      400,
      'BadRequestError',
    ],
    [
      'messages of the wrong type',
      '/v1/chat/completions',
      { model: 'test-model', messages: 'hello' },
      400,
      'BadRequestError',
    ],
    // Custom roles (`ipython`) are accepted, as vLLM does; an empty one is no role.
    [
      'an empty role',
      '/v1/chat/completions',
      { model: 'test-model', messages: [{ role: '', content: 'x' }] },
      400,
      'BadRequestError',
    ],
    [
      'Messages without max_tokens',
      '/v1/messages',
      { model: 'test-model', messages: [{ role: 'user', content: 'x' }] },
      400,
      'BadRequestError',
    ],
    [
      'Messages for an unknown model',
      '/v1/messages',
      { model: 'nope', max_tokens: 2, messages: [{ role: 'user', content: 'x' }] },
      404,
      'NotFoundError',
    ],
    [
      'negative max_tokens',
      '/v1/completions',
      { model: 'test-model', prompt: 'x', max_tokens: -1 },
      400,
      'BadRequestError',
    ],
    ['missing prompt', '/v1/completions', { model: 'test-model' }, 400, 'BadRequestError'],
    [
      'an unknown model',
      '/v1/chat/completions',
      { model: 'nope', messages: [{ role: 'user', content: 'x' }] },
      404,
      'NotFoundError',
    ],
    [
      'a prompt longer than max-model-len',
      '/v1/completions',
      { model: 'test-model', prompt: tokenPrompt(5000, 1) },
      400,
      'BadRequestError',
    ],
    [
      'prompt + max_tokens over max-model-len',
      '/v1/completions',
      { model: 'test-model', prompt: tokenPrompt(4000, 1), max_tokens: 200 },
      400,
      'BadRequestError',
    ],
    [
      'a body over the limit',
      '/v1/completions',
      { model: 'test-model', prompt: 'x'.repeat(100_000) },
      413,
      'BadRequestError',
    ],
  ];

  it.each(cases)('rejects %s', async (_name, path, body, status, type) => {
    const response = await postJson(sim.url, path, body);
    expect(response.status).toBe(status);
    expect(response.json.error.type).toBe(type);
    expect(response.json.error.code).toBe(status);
    expect(typeof response.json.error.message).toBe('string');
  });

  it('names the context limit the way vLLM does', async () => {
    const response = await postJson(sim.url, '/v1/completions', { model: 'test-model', prompt: tokenPrompt(5000, 1) });
    expect(response.json.error.message).toContain("This model's maximum context length is 4096 tokens");
  });

  it('still serves after bad input, and answers unknown paths with 404', async () => {
    const ok = await postJson(sim.url, '/v1/completions', { model: 'test-model', prompt: 'fine', max_tokens: 1 });
    expect(ok.status).toBe(200);
    const missing = await fetch(`${sim.url}/v2/nothing`);
    expect(missing.status).toBe(404);
  });

  it('uses the flat error shape of vLLM 0.6 and SGLang, and llama.cpp its own', async () => {
    const v0 = await startTestSim({ profile: 'fast', metricsDialect: 'vllm-v0' });
    const llama = await startTestSim({ profile: 'fast', metricsDialect: 'llamacpp' });
    try {
      const flat = await postJson(v0.url, '/v1/chat/completions', {
        model: 'nope',
        messages: [{ role: 'user', content: 'x' }],
      });
      expect(flat.json).toMatchObject({ object: 'error', type: 'NotFoundError', code: 404 });
      const llamaError = await postJson(llama.url, '/v1/chat/completions', { model: 'test-model' });
      expect(llamaError.json.error).toMatchObject({ code: 400, type: 'invalid_request_error' });
    } finally {
      await v0.close();
      await llama.close();
    }
  });
});
