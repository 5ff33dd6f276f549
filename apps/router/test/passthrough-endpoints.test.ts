import OpenAI, { toFile } from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestCluster, totalInflight, type TestCluster } from './start-test-cluster';

/**
 * Issue 16, "other endpoints": vLLM's endpoints besides generation pass through the router to real sims
 * (each answers in vLLM's shape: apps/vllm-sim/src/routes/pooling-routes.ts), `GET /v1/models/{id}` is
 * the router's own, and validation is no stricter than vLLM's: custom roles and requests without
 * `model` (when one model is served) go through.
 */
async function post(
  url: string,
  body: unknown,
): Promise<{ status: number; body: Record<string, unknown>; backend: string | null }> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return {
    status: response.status,
    body: (await response.json()) as Record<string, unknown>,
    backend: response.headers.get('x-router-backend'),
  };
}

describe('pass-through of vLLM endpoints, one model served', () => {
  let cluster: TestCluster;
  let client: OpenAI;
  beforeAll(async () => {
    cluster = await startTestCluster({ backends: 2, router: { multipartBodyLimitBytes: 512 * 1024 } });
    client = new OpenAI({ baseURL: `${cluster.routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  afterAll(() => cluster.close());

  it('tokenizes and detokenizes through the router, round trip, with and without model', async () => {
    const tokenized = await post(`${cluster.routerUrl}/tokenize`, {
      model: 'test-model',
      prompt: 'Routing keeps caches warm.',
    });
    expect(tokenized.status).toBe(200);
    expect(cluster.sims.map((sim) => sim.id)).toContain(tokenized.backend);
    const tokens = tokenized.body.tokens as number[];
    expect(tokens.length).toBe(tokenized.body.count);
    const detokenized = await post(`${cluster.routerUrl}/detokenize`, { tokens });
    expect(detokenized.status).toBe(200);
    expect(detokenized.body.prompt).toBe('Routing keeps caches warm.');
    // A chat (`messages`) is tokenized through the template: more tokens than its text alone.
    const chat = await post(`${cluster.routerUrl}/tokenize`, {
      model: 'test-model',
      messages: [{ role: 'user', content: 'Routing keeps caches warm.' }],
    });
    expect(chat.status).toBe(200);
    expect(chat.body.count).toBeGreaterThan(tokens.length);
  });

  it('embeds with the official client (the same vector for the same input, from either backend), and pools', async () => {
    const first = await client.embeddings.create({ model: 'test-model', input: ['alpha', 'beta'] });
    const again = await client.embeddings.create({ model: 'test-model', input: 'alpha' });
    expect(first.data).toHaveLength(2);
    expect(again.data[0]?.embedding).toEqual(first.data[0]?.embedding);
    expect(first.data[0]?.embedding).not.toEqual(first.data[1]?.embedding);
    const pooled = await post(`${cluster.routerUrl}/pooling`, { model: 'test-model', input: 'alpha' });
    expect(pooled.status).toBe(200);
    const vector = (pooled.body.data as Array<{ data: number[] }>)[0]?.data ?? [];
    expect(vector.map((value) => Math.fround(value))).toEqual(first.data[0]?.embedding);
  });

  it('scores, reranks and classifies on every path vLLM serves them', async () => {
    for (const path of ['/score', '/v1/score']) {
      const scored = await post(`${cluster.routerUrl}${path}`, {
        model: 'test-model',
        text_1: 'query',
        text_2: ['a', 'b', 'c'],
      });
      expect(scored.status).toBe(200);
      expect(scored.body.data).toHaveLength(3);
    }
    const answers = [];
    for (const path of ['/rerank', '/v1/rerank', '/v2/rerank']) {
      const reranked = await post(`${cluster.routerUrl}${path}`, {
        query: 'cache',
        documents: ['one', 'two', 'three'],
        top_n: 2,
      });
      expect(reranked.status).toBe(200);
      answers.push(reranked.body.results);
    }
    expect(answers[1]).toEqual(answers[0]);
    expect(answers[0]).toHaveLength(2);
    const classified = await post(`${cluster.routerUrl}/classify`, { model: 'test-model', input: ['good', 'bad'] });
    expect(classified.status).toBe(200);
    expect((classified.body.data as Array<{ probs: number[] }>).map((entry) => entry.probs.length)).toEqual([2, 2]);
  });

  it('forwards audio uploads (multipart/form-data) byte for byte, with the model from the form, via the official client', async () => {
    const audio = Buffer.alloc(200_000);
    for (let index = 0; index < audio.length; index++) audio[index] = (index * 31) % 251;
    const { createHash } = await import('node:crypto');
    const transcription = (await client.audio.transcriptions.create({
      model: 'test-model',
      file: await toFile(audio, 'clip.wav', { type: 'audio/wav' }),
    })) as unknown as { text: string; sim_file_sha256: string };
    expect(transcription.text).toBe(`sim transcription of ${audio.length} bytes`);
    expect(transcription.sim_file_sha256).toBe(createHash('sha256').update(audio).digest('hex'));
    const translation = await client.audio.translations.create({
      model: 'test-model',
      file: await toFile(audio.subarray(0, 1000), 'clip.wav'),
    });
    expect(translation.text).toBe('sim translation of 1000 bytes');
  });

  it('refuses an upload over multipartBodyLimitBytes with a 413 in the OpenAI error shape', async () => {
    const error = await client.audio.transcriptions
      .create({ model: 'test-model', file: await toFile(Buffer.alloc(600 * 1024), 'big.wav') })
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect((error as InstanceType<typeof OpenAI.APIError>).status).toBe(413);
    expect(totalInflight(cluster.router)).toBe(0);
  });

  it('answers GET /v1/models/{id} itself: the model object, or a 404 in the OpenAI error shape', async () => {
    const model = await client.models.retrieve('test-model');
    expect(model).toMatchObject({ id: 'test-model', object: 'model', owned_by: 'kvroute' });
    const missing = await client.models.retrieve('no-such-model').catch((caught: unknown) => caught);
    expect(missing).toBeInstanceOf(OpenAI.NotFoundError);
    const body = (await (await fetch(`${cluster.routerUrl}/v1/models/org/no-such-model`)).json()) as {
      error: { code: string; message: string };
    };
    expect(body.error.code).toBe('ROUTER_ERR_MODEL_NOT_FOUND');
    expect(body.error.message).toContain('org/no-such-model');
  });

  it('accepts custom roles (ipython) and requests without model, as vLLM does', async () => {
    const custom = await post(`${cluster.routerUrl}/v1/chat/completions`, {
      model: 'test-model',
      max_tokens: 3,
      messages: [
        { role: 'user', content: 'What is 2+2?' },
        { role: 'ipython', content: '4' },
      ],
    });
    expect(custom.status).toBe(200);
    const modelless = await post(`${cluster.routerUrl}/v1/chat/completions`, {
      max_tokens: 3,
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(modelless.status).toBe(200);
    expect(modelless.body.model).toBe('test-model');
    const completion = await post(`${cluster.routerUrl}/v1/completions`, {
      prompt: 'Once',
      max_tokens: 2,
      stream: false,
    });
    expect(completion.status).toBe(200);
    const embedding = await post(`${cluster.routerUrl}/v1/embeddings`, { input: 'alpha' });
    expect(embedding.status).toBe(200);
  });
});

describe('requests without model when several models are served', () => {
  let cluster: TestCluster;
  beforeAll(async () => {
    cluster = await startTestCluster({ sims: [{ model: 'alpha' }, { model: 'beta' }] });
  });
  afterAll(() => cluster.close());

  it('are a 400 naming the rule; with a model they route to its pool', async () => {
    const modelless = await post(`${cluster.routerUrl}/v1/chat/completions`, {
      max_tokens: 2,
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(modelless.status).toBe(400);
    expect((modelless.body.error as { message: string }).message).toContain(
      '`model` is required: this router serves 2 models',
    );
    const tokenize = await post(`${cluster.routerUrl}/tokenize`, { prompt: 'x' });
    expect(tokenize.status).toBe(400);
    const named = await post(`${cluster.routerUrl}/tokenize`, { model: 'beta', prompt: 'x' });
    expect(named.status).toBe(200);
    expect(named.backend).toBe(cluster.sims[1]?.id);
  });
});
