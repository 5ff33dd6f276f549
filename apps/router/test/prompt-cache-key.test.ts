import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestCluster, type TestCluster } from './start-test-cluster';

/**
 * `prompt_cache_key` (OpenAI's prompt-caching hint, on chat completions and Responses) is a session
 * key: with the `session` policy, requests with one key go to one backend whatever their text, unless
 * an `X-Session-Id` header says otherwise (the header comes first, then `prompt_cache_key`, then
 * `user`: libs/routing routing-request.ts).
 */
describe('prompt_cache_key as a session key', () => {
  let cluster: TestCluster;
  let client: OpenAI;
  beforeAll(async () => {
    cluster = await startTestCluster({ backends: 3, router: { policy: 'session' } });
    client = new OpenAI({ baseURL: `${cluster.routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
  });
  afterAll(() => cluster.close());

  const backendOfChat = async (
    key: string,
    text: string,
    extra: { user?: string; headers?: Record<string, string> } = {},
  ): Promise<string | null> => {
    const answer = await client.chat.completions
      .create(
        {
          model: 'test-model',
          messages: [{ role: 'user', content: text }],
          max_tokens: 1,
          prompt_cache_key: key,
          ...(extra.user === undefined ? {} : { user: extra.user }),
        },
        { headers: extra.headers ?? {} },
      )
      .withResponse();
    return answer.response.headers.get('x-router-backend');
  };

  it('keeps one key on one backend across unrelated prompts, chat and Responses alike', async () => {
    const backend = await backendOfChat('agent-42', 'first prompt');
    for (let index = 0; index < 5; index++)
      expect(await backendOfChat('agent-42', `unrelated prompt number ${index} ${'x'.repeat(index * 50)}`)).toBe(
        backend,
      );
    for (let index = 0; index < 3; index++) {
      const answer = await client.responses
        .create({
          model: 'test-model',
          input: `responses prompt ${index}`,
          max_output_tokens: 1,
          prompt_cache_key: 'agent-42',
        })
        .withResponse();
      expect(answer.response.headers.get('x-router-backend')).toBe(backend);
      expect(answer.response.headers.get('x-router-reason')).toBe('session-affinity');
    }
  });

  it('spreads different keys over the backends, and prefers X-Session-Id over the key and the key over user', async () => {
    const backends = new Set<string | null>();
    for (let index = 0; index < 12; index++) backends.add(await backendOfChat(`key-${index}`, 'same prompt'));
    expect(backends.size).toBeGreaterThan(1);

    // Two keys on different backends: the header picks its own key's backend, the body's user does not matter.
    const byKey = new Map<string, string | null>();
    for (let index = 0; index < 12; index++)
      byKey.set(`key-${index}`, await backendOfChat(`key-${index}`, 'same prompt'));
    const [keyA, backendA] = [...byKey.entries()][0] as [string, string];
    const [keyB, backendB] = [...byKey.entries()].find(([, backend]) => backend !== backendA) as [string, string];
    expect(await backendOfChat(keyA, 'p', { headers: { 'x-session-id': keyB } })).toBe(backendB);
    expect(await backendOfChat(keyA, 'p', { user: keyB })).toBe(backendA);
  });
});
