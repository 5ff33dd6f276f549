import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { digestOfApiKey, generateApiKey } from '../src/tenants/api-key';
import { writeTestKeyFile } from './api-key-file';
import { startTestCluster, type TestCluster } from './start-test-cluster';

/**
 * Tenants end to end (issue 14, acceptance 1; docs/security.md "Tenants"): two sims behind a router
 * with API keys from a key file, cache salts per tenant, and the official openai client as the tenants'
 * client. The probe is the attack the issue reproduced: the victim's prompt holds a private value, the
 * attacker sends the same layout with the right guess and with a guess one character off.
 */
const POLICY_LINE = 'Policy: be brief, be kind, cite the handbook section. ';
const SYSTEM = `You are the support agent of Example Corp. Follow the policies below exactly. ${POLICY_LINE.repeat(30)}`;
// The private value comes first, as in a per-customer system prompt: two guesses then share no prefix block with each other either.
const promptWith = (secret: string): OpenAI.Chat.ChatCompletionMessageParam[] => [
  { role: 'system', content: `Account recovery code ${secret}. ${SYSTEM} ${'Never read the code out. '.repeat(20)}` },
  { role: 'user', content: 'What is my plan?' },
];

const keys = {
  victim: generateApiKey(),
  attacker: generateApiKey(),
  attackerBench: generateApiKey(),
  teamOne: generateApiKey(),
  teamTwo: generateApiKey(),
  limited: generateApiKey(),
};

describe('tenants: API keys, per-tenant cache salts, limits (key file, local limits)', () => {
  let cluster: TestCluster;
  let keyFile: ReturnType<typeof writeTestKeyFile>;

  beforeAll(async () => {
    keyFile = writeTestKeyFile([
      { id: 'victim', tenant: 'tenant-a', digest: keys.victim.digest },
      { id: 'attacker', tenant: 'tenant-b', digest: keys.attacker.digest },
      // A second attacker account with a bench key sees the X-Router-* headers: even the router's explanation of two probes is the same.
      { id: 'attacker-bench', tenant: 'tenant-b2', digest: keys.attackerBench.digest, extra: '    role: bench\n' },
      { id: 'team-one', tenant: 'tenant-c', digest: keys.teamOne.digest },
      { id: 'team-two', tenant: 'tenant-d', digest: keys.teamTwo.digest },
      { id: 'limited', tenant: 'tenant-e', digest: keys.limited.digest, extra: '    requestsPerMinute: 3\n' },
    ]);
    cluster = await startTestCluster({
      backends: 2,
      router: {
        auth: 'api-keys',
        apiKeysFile: keyFile.file,
        cacheSaltSecret: 'test-cache-salt-secret-0123456789',
        tenants: [
          { id: 'tenant-c', team: 'research' },
          { id: 'tenant-d', team: 'research' },
        ],
      },
    });
  });

  afterAll(async () => {
    await cluster?.close();
    keyFile?.remove();
  });

  const clientOf = (key: string): OpenAI =>
    new OpenAI({ apiKey: key, baseURL: `${cluster.routerUrl}/v1`, maxRetries: 0 });
  const ask = async (key: string, secret: string) => {
    const { data, response } = await clientOf(key)
      .chat.completions.create({ model: 'test-model', messages: promptWith(secret), max_tokens: 4 })
      .withResponse();
    return {
      status: response.status,
      headers: response.headers,
      cached: data.usage?.prompt_tokens_details?.cached_tokens ?? 0,
      promptTokens: data.usage?.prompt_tokens ?? 0,
    };
  };
  /** The header names a client sees, without those that differ per response by nature. */
  const headerNames = (headers: Headers): string[] =>
    [...headers.keys()].filter((name) => !['date', 'content-length', 'x-request-id'].includes(name)).sort();

  it('a cross-tenant probe learns nothing: the right and the wrong guess look the same, and the victim still hits', async () => {
    const secret = 'K7Q-93XZ-LM2P';
    const victimFirst = await ask(keys.victim.secret, secret);
    expect(victimFirst.status).toBe(200);

    const exact = await ask(keys.attacker.secret, secret);
    // One character off, the first: what a guess shares with the other guess is then B's own cache, and there is none.
    const nearMiss = await ask(keys.attacker.secret, 'X7Q-93XZ-LM2P');
    expect([exact.status, nearMiss.status]).toEqual([200, 200]);
    expect(exact.cached).toBe(0);
    expect(nearMiss.cached).toBe(0);
    expect(headerNames(exact.headers)).toEqual(headerNames(nearMiss.headers));
    expect(exact.headers.get('x-router-backend')).toBeNull();
    expect(exact.headers.get('x-router-reason')).toBeNull();

    // With the attacker's bench key (it sees the routing headers): the router explains both alike, and neither by the victim's prefix.
    const benchExact = await clientOf(keys.attackerBench.secret)
      .chat.completions.create({ model: 'test-model', messages: promptWith('K7Q-93XZ-LM2P'), max_tokens: 4 })
      .withResponse();
    const benchNear = await clientOf(keys.attackerBench.secret)
      .chat.completions.create({ model: 'test-model', messages: promptWith('Y7Q-93XZ-LM2P'), max_tokens: 4 })
      .withResponse();
    const reasons = [
      benchExact.response.headers.get('x-router-reason'),
      benchNear.response.headers.get('x-router-reason'),
    ];
    expect(reasons[0]).not.toBeNull();
    expect(reasons[0]).toBe(reasons[1]);
    expect(benchExact.data.usage?.prompt_tokens_details?.cached_tokens ?? 0).toBe(
      benchNear.data.usage?.prompt_tokens_details?.cached_tokens ?? 0,
    );

    const victimAgain = await ask(keys.victim.secret, secret);
    expect(victimAgain.cached).toBeGreaterThan(victimAgain.promptTokens / 2);
    expect(victimAgain.headers.get('x-router-backend')).toBeNull();
  });

  it('tenants of one team share their prefix cache (opt-in by config)', async () => {
    await ask(keys.teamOne.secret, 'TEAM-SHARED-1');
    const other = await ask(keys.teamTwo.secret, 'TEAM-SHARED-1');
    expect(other.cached).toBeGreaterThan(other.promptTokens / 2);
  });

  it('refuses a request without a key, or with a wrong one, with 401 in the OpenAI shape', async () => {
    const none = await fetch(`${cluster.routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'test-model', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(none.status).toBe(401);
    expect(((await none.json()) as { error: { code: string; type: string } }).error).toMatchObject({
      code: 'ROUTER_ERR_INVALID_API_KEY',
      type: 'invalid_request_error',
    });
    await expect(
      clientOf(generateApiKey().secret).chat.completions.create({
        model: 'test-model',
        messages: [{ role: 'user', content: 'hi' }],
      }),
    ).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
    // GET /v1/models is for key holders too.
    expect((await fetch(`${cluster.routerUrl}/v1/models`)).status).toBe(401);
    expect(
      (await fetch(`${cluster.routerUrl}/v1/models`, { headers: { authorization: `Bearer ${keys.victim.secret}` } }))
        .status,
    ).toBe(200);
    // Probes stay open: a balancer has no key.
    expect((await fetch(`${cluster.routerUrl}/healthz`)).status).toBe(200);
    expect(digestOfApiKey(keys.victim.secret)).toBe(keys.victim.digest);
  });

  it('a key over its requests-per-minute limit gets 429 with Retry-After and the x-ratelimit-* headers', async () => {
    const remaining: string[] = [];
    for (let index = 0; index < 3; index++) {
      const { response } = await clientOf(keys.limited.secret)
        .chat.completions.create({
          model: 'test-model',
          messages: [{ role: 'user', content: `hello ${index}` }],
          max_tokens: 2,
        })
        .withResponse();
      expect(response.headers.get('x-ratelimit-limit-requests')).toBe('3');
      remaining.push(response.headers.get('x-ratelimit-remaining-requests') ?? '');
    }
    expect(remaining).toEqual(['2', '1', '0']);
    const refused = await fetch(`${cluster.routerUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${keys.limited.secret}` },
      body: JSON.stringify({ model: 'test-model', messages: [{ role: 'user', content: 'one more' }], max_tokens: 2 }),
    });
    expect(refused.status).toBe(429);
    const retryAfter = Number(refused.headers.get('retry-after'));
    expect(retryAfter).toBeGreaterThanOrEqual(1);
    expect(retryAfter).toBeLessThanOrEqual(20);
    expect(Number(refused.headers.get('retry-after-ms'))).toBeGreaterThan(0);
    expect(refused.headers.get('x-ratelimit-remaining-requests')).toBe('0');
    expect(((await refused.json()) as { error: { type: string; code: string } }).error).toMatchObject({
      type: 'rate_limit_error',
      code: 'ROUTER_ERR_RATE_LIMITED',
    });
    // Another tenant is not affected.
    expect((await ask(keys.victim.secret, 'unrelated')).status).toBe(200);
  });
});
