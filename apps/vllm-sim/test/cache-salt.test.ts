import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CACHE_SALT_NOT_NON_EMPTY_STRING,
  CACHE_SALT_NOT_SUPPORTED_ON_V0,
  CACHE_SALT_TOO_LONG_OR_FORBIDDEN,
} from '../src/generation/cache-salt';
import { postJson, startTestSim, tokenPrompt, type TestSim } from './start-test-sim';

/** cached_tokens of one answer; the sim, like vLLM, omits prompt_tokens_details on a miss. */
function cachedTokensOf(json: { usage?: { prompt_tokens_details?: { cached_tokens?: number } | null } }): number {
  return json.usage?.prompt_tokens_details?.cached_tokens ?? 0;
}

/** `cache_salt` over HTTP, as vLLM takes it: a partition of the prefix cache, validated at the API (README "cache_salt"). */
describe('vllm-sim cache_salt', () => {
  let sim: TestSim;
  beforeAll(async () => {
    sim = await startTestSim({ profile: 'fast' });
  });
  afterAll(() => sim.close());

  /** A chat request whose prompt is its own (`topic`), so tests never hit each other's blocks. */
  function chat(topic: string, salt?: unknown): Record<string, unknown> {
    const body: Record<string, unknown> = {
      model: 'test-model',
      messages: [
        { role: 'user', content: `the private record of ${topic}: ${'account balance and notes '.repeat(20)}` },
      ],
      max_tokens: 2,
    };
    if (salt !== undefined) body.cache_salt = salt;
    return body;
  }

  /** Asks the oracle first, then sends the request: both numbers, and the prompt length. */
  async function send(
    path: string,
    body: Record<string, unknown>,
  ): Promise<{ cached: number; predicted: number; prompt: number }> {
    const oracle = await postJson(sim.url, '/sim/match', body);
    expect(oracle.status).toBe(200);
    const answer = await postJson(sim.url, path, body);
    expect(answer.status).toBe(200);
    return {
      cached: cachedTokensOf(answer.json),
      predicted: oracle.json.cached_tokens,
      prompt: answer.json.usage.prompt_tokens,
    };
  }

  it('shares blocks between requests with the same salt, and none across salts or with unsalted requests', async () => {
    const owner = await send('/v1/chat/completions', chat('tenant A', 'salt-of-tenant-a-0123456789'));
    expect(owner.cached).toBe(0);
    const repeat = await send('/v1/chat/completions', chat('tenant A', 'salt-of-tenant-a-0123456789'));
    expect(repeat.cached).toBe(Math.floor((repeat.prompt - 1) / 16) * 16);
    expect(repeat.cached).toBeGreaterThan(0);
    expect(repeat.predicted).toBe(repeat.cached);

    // Every probe misses entirely: another salt, a salt one character off, and no salt at all.
    for (const probe of ['salt-of-tenant-b-0123456789', 'salt-of-tenant-a-0123456788', undefined]) {
      const result = await send('/v1/chat/completions', chat('tenant A', probe));
      expect(result).toMatchObject({ cached: 0, predicted: 0 });
    }
    // The owner still hits after the probes (they cached their own copies, not touched the owner's).
    expect((await send('/v1/chat/completions', chat('tenant A', 'salt-of-tenant-a-0123456789'))).cached).toBe(
      repeat.cached,
    );
  });

  it('keeps unsalted requests sharing as before, and a salted request misses their blocks', async () => {
    await send('/v1/chat/completions', chat('everyone'));
    const unsalted = await send('/v1/chat/completions', chat('everyone'));
    expect(unsalted.cached).toBeGreaterThan(0);
    expect(await send('/v1/chat/completions', chat('everyone', 'x'))).toMatchObject({ cached: 0, predicted: 0 });
  });

  it('takes a null cache_salt as none', async () => {
    await send('/v1/chat/completions', chat('null salt'));
    const withNull = await send('/v1/chat/completions', chat('null salt', null));
    expect(withNull.cached).toBeGreaterThan(0);
    expect(withNull.predicted).toBe(withNull.cached);
  });

  it('salts text completions too, batched prompts included', async () => {
    const prompt = tokenPrompt(200, 77);
    const body = (salt: string): Record<string, unknown> => ({
      model: 'test-model',
      prompt,
      max_tokens: 1,
      cache_salt: salt,
    });
    await send('/v1/completions', body('completion-salt'));
    expect((await send('/v1/completions', body('completion-salt'))).cached).toBe(192);
    expect(await send('/v1/completions', body('completion-salT'))).toMatchObject({ cached: 0, predicted: 0 });
    const batch = await postJson(sim.url, '/sim/match', {
      model: 'test-model',
      prompt: [prompt, prompt],
      cache_salt: 'completion-salt',
    });
    expect(batch.json.prompts.map((entry: { cached_tokens: number }) => entry.cached_tokens)).toEqual([192, 192]);
  });

  it('counts salted requests in the prefix-cache counters like any other', async () => {
    type PrefixCounters = { prefix_cache_queries_tokens: number; prefix_cache_hits_tokens: number };
    const stateOf = async (): Promise<PrefixCounters> =>
      (await (await fetch(`${sim.url}/sim/state`)).json()) as PrefixCounters;
    const before = await stateOf();
    const first = await send('/v1/chat/completions', chat('counters', 'counter-salt'));
    const second = await send('/v1/chat/completions', chat('counters', 'counter-salt'));
    const after = await stateOf();
    expect(after.prefix_cache_queries_tokens - before.prefix_cache_queries_tokens).toBe(first.prompt + second.prompt);
    expect(after.prefix_cache_hits_tokens - before.prefix_cache_hits_tokens).toBe(second.cached);
  });

  const invalid: Array<[string, unknown, string]> = [
    ['an empty string', '', CACHE_SALT_NOT_NON_EMPTY_STRING],
    ['a number', 42, CACHE_SALT_NOT_NON_EMPTY_STRING],
    ['an object', { tenant: 'a' }, CACHE_SALT_NOT_NON_EMPTY_STRING],
    ['129 characters', 's'.repeat(129), CACHE_SALT_TOO_LONG_OR_FORBIDDEN],
    ["a '/'", 'tenant/a', CACHE_SALT_TOO_LONG_OR_FORBIDDEN],
    ["an '@'", 'tenant@a', CACHE_SALT_TOO_LONG_OR_FORBIDDEN],
    ["a '\\'", 'tenant\\a', CACHE_SALT_TOO_LONG_OR_FORBIDDEN],
    ['a NUL', 'tenant\u0000a', CACHE_SALT_TOO_LONG_OR_FORBIDDEN],
  ];

  it.each(invalid)(
    'rejects %s with 400 and vLLM’s message, on both endpoints and the oracle',
    async (_name, salt, message) => {
      const bodies: Array<[string, Record<string, unknown>]> = [
        ['/v1/chat/completions', chat('invalid', salt)],
        ['/v1/completions', { model: 'test-model', prompt: 'hello there', cache_salt: salt }],
        ['/sim/match', chat('invalid', salt)],
      ];
      for (const [path, body] of bodies) {
        const response = await postJson(sim.url, path, body);
        expect(response.status).toBe(400);
        expect(response.json).toEqual({ error: { message, type: 'BadRequestError', param: null, code: 400 } });
      }
    },
  );

  it('reports a bad salt before other field errors, as vLLM’s model validator runs first', async () => {
    const response = await postJson(sim.url, '/v1/chat/completions', {
      model: 'test-model',
      messages: 'not a list',
      cache_salt: '',
    });
    expect(response.json.error.message).toBe(CACHE_SALT_NOT_NON_EMPTY_STRING);
  });

  it('counts the 128-character limit in code points, as Python does', async () => {
    const emoji = '\u{1F512}'.repeat(128); // 128 code points, 256 UTF-16 units
    expect((await postJson(sim.url, '/v1/chat/completions', chat('emoji', emoji))).status).toBe(200);
    expect((await postJson(sim.url, '/v1/chat/completions', chat('emoji', `${emoji}x`))).status).toBe(400);
    expect((await postJson(sim.url, '/v1/chat/completions', chat('emoji', 's'.repeat(128)))).status).toBe(200);
  });

  it('refuses any salt on the V0 engine, with the flat error of old vLLM; null still passes', async () => {
    const v0 = await startTestSim({ profile: 'fast', metricsDialect: 'vllm-v0' });
    try {
      for (const path of ['/v1/chat/completions', '/sim/match']) {
        const refused = await postJson(v0.url, path, chat('v0', 'any-salt'));
        expect(refused.status).toBe(400);
        expect(refused.json).toMatchObject({
          object: 'error',
          message: CACHE_SALT_NOT_SUPPORTED_ON_V0,
          type: 'BadRequestError',
          code: 400,
        });
      }
      expect((await postJson(v0.url, '/v1/chat/completions', chat('v0', null))).status).toBe(200);
    } finally {
      await v0.close();
    }
  });
});
