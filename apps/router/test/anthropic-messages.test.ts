import Anthropic from '@anthropic-ai/sdk';
import { startRedis, type TestRedis } from '@kvroute/testing';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestCluster, totalInflight, waitFor, type TestCluster } from './start-test-cluster';

/**
 * Issue 16, acceptance 2: the official `@anthropic-ai/sdk` streaming Messages through the router, with
 * prefix affinity across turns. Real Redis (the shared state), three vllm-sim backends on loopback,
 * prompt-token details on in the sims, so each answer's usage says how much of the prompt the backend
 * found in its cache (`cache_read_input_tokens`, Anthropic's meaning: apps/vllm-sim/README.md).
 */
const SYSTEM = `You are the on-call assistant of a routing team. ${'Follow the runbook, answer in one sentence, cite the section. '.repeat(40)}`;
const TOOLS: Anthropic.Messages.Tool[] = [
  {
    name: 'lookup_runbook',
    description: 'Finds a runbook section.',
    input_schema: { type: 'object', properties: { section: { type: 'string' } }, required: ['section'] },
  },
];

interface TurnResult {
  readonly backend: string;
  readonly text: string;
  readonly usage: Anthropic.Messages.Usage | Anthropic.Messages.MessageDeltaUsage | null;
  readonly startUsage: Anthropic.Messages.Usage | null;
}

/** One streamed turn through `client`; the backend from the routing header of the raw response. */
async function streamTurn(
  client: Anthropic,
  messages: Anthropic.Messages.MessageParam[],
  conversation: number,
): Promise<TurnResult> {
  const { data: stream, response } = await client.messages
    .create({
      model: 'test-model',
      max_tokens: 12,
      system: [{ type: 'text', text: SYSTEM }],
      tools: TOOLS,
      messages,
      stream: true,
      metadata: { user_id: `user-${conversation}` },
    })
    .withResponse();
  let text = '';
  let usage: TurnResult['usage'] = null;
  let startUsage: TurnResult['startUsage'] = null;
  for await (const event of stream) {
    if (event.type === 'message_start') startUsage = event.message.usage;
    if (event.type === 'content_block_delta' && event.delta.type === 'text_delta') text += event.delta.text;
    if (event.type === 'message_delta') usage = event.usage;
  }
  return { backend: response.headers.get('x-router-backend') ?? '', text, usage, startUsage };
}

describe('Anthropic Messages through the router (official SDK, real Redis)', () => {
  let redis: TestRedis;
  let cluster: TestCluster;
  let client: Anthropic;
  /** Cached tokens the sims reported over the first test's turns (`cache_read_input_tokens`). */
  let reportedCached = 0;
  beforeAll(async () => {
    redis = await startRedis();
    // toolCallProbability 0: text turns (the offered tool is never called), each answer sent back as the next turn's context.
    cluster = await startTestCluster({
      backends: 3,
      sim: { seed: 11, promptTokensDetails: true, toolCallProbability: 0 },
      router: { redisUrl: redis.url, policy: 'prefixaware' },
    });
    client = new Anthropic({ baseURL: cluster.routerUrl, apiKey: 'unused', maxRetries: 0 });
  });
  afterAll(async () => {
    await cluster?.close();
    await redis?.stop();
  });

  it('keeps each multi-turn conversation on one backend, and the cached tokens rise turn by turn as the sim reports them', async () => {
    const conversations = 3;
    const turnsEach = 4;
    const results: TurnResult[][] = [];
    for (let conversation = 0; conversation < conversations; conversation++) {
      const messages: Anthropic.Messages.MessageParam[] = [];
      const turns: TurnResult[] = [];
      for (let turn = 0; turn < turnsEach; turn++) {
        messages.push({
          role: 'user',
          content: [
            {
              type: 'text',
              text: `Conversation ${conversation}, turn ${turn}: ${'what changed in section 4.2 and why? '.repeat(6)}`,
            },
          ],
        });
        const result = await streamTurn(client, messages, conversation);
        turns.push(result);
        messages.push({ role: 'assistant', content: [{ type: 'text', text: result.text }] });
      }
      results.push(turns);
    }
    const backendIds = cluster.sims.map((sim) => sim.id);
    for (const turns of results) {
      // Affinity: every turn of a conversation on the backend of its first turn.
      expect(backendIds).toContain(turns[0]?.backend);
      expect(new Set(turns.map((turn) => turn.backend)).size).toBe(1);
      for (const [index, turn] of turns.entries()) {
        expect(turn.text.length).toBeGreaterThan(0);
        expect(turn.usage?.output_tokens).toBeGreaterThan(0);
        // The stream's message_start and message_delta agree on what was read from the cache.
        expect(turn.usage?.cache_read_input_tokens).toBe(turn.startUsage?.cache_read_input_tokens);
        if (index === 0) continue;
        const previous = turns[index - 1] as TurnResult;
        const cached = turn.usage?.cache_read_input_tokens ?? 0;
        // Turn k+1 finds turn k's whole prompt (block-aligned) in the cache: more than turn k found.
        expect(cached).toBeGreaterThan(previous.usage?.cache_read_input_tokens ?? 0);
        const previousPrompt = (previous.usage?.input_tokens ?? 0) + (previous.usage?.cache_read_input_tokens ?? 0);
        expect(cached).toBeGreaterThanOrEqual(previousPrompt - 16);
      }
    }
    // The system prompt and tools are shared: a conversation's first turn after the first one found them cached somewhere only if it
    // landed where they are; the prefix router sends it there (the shared head is a prefix of every conversation).
    expect(results.slice(1).every((turns) => (turns[0]?.usage?.cache_read_input_tokens ?? 0) > 0)).toBe(true);
    // A stream's lease is released when its upstream response ends, which the SDK may not wait for after `message_stop`.
    await waitFor(() => totalInflight(cluster.router) === 0);
    reportedCached = results.flat().reduce((sum, turn) => sum + (turn.usage?.cache_read_input_tokens ?? 0), 0);
  });

  it("learns from Messages streams: the router's observed cached tokens equal what the sims reported, every response checked", async () => {
    expect(reportedCached).toBeGreaterThan(0);
    const sumOf = (metrics: string, name: string, filter = ''): number =>
      [...metrics.matchAll(new RegExp(`^${name}\\{([^}]*)\\} (\\d+)`, 'gm'))]
        .filter((match) => (match[1] ?? '').includes(filter))
        .reduce((sum, match) => sum + Number(match[2]), 0);
    let metrics = '';
    // Learn runs after each response has ended: wait for the last one's.
    await waitFor(async () => {
      metrics = await (await fetch(`${cluster.opsUrl}/metrics`)).text();
      return sumOf(metrics, 'kvroute_router_prefix_predictions_total') >= 12;
    });
    expect(sumOf(metrics, 'kvroute_router_prefix_observed_cached_tokens_total')).toBe(reportedCached);
    expect(sumOf(metrics, 'kvroute_router_prefix_predictions_total', 'outcome="unverified"')).toBe(0);
    // The routing text tracks the prompt the engine caches: every prediction confirmed, and the router
    // predicted most of what the engines found (a routing text of the model alone would predict nothing).
    expect(sumOf(metrics, 'kvroute_router_prefix_predictions_total', 'outcome="confirmed"')).toBe(12);
    expect(sumOf(metrics, 'kvroute_router_prefix_confirmed_tokens_total')).toBeGreaterThan(0.8 * reportedCached);
  });

  it('non-streams a Messages request with the same text as the stream of the same prompt, and usage in Anthropic shape', async () => {
    const messages: Anthropic.Messages.MessageParam[] = [{ role: 'user', content: 'Name one colour.' }];
    const whole = await client.messages.create({ model: 'test-model', max_tokens: 6, messages });
    const streamed = await client.messages.stream({ model: 'test-model', max_tokens: 6, messages }).finalMessage();
    expect(whole.type).toBe('message');
    expect(whole.content[0]?.type).toBe('text');
    expect(streamed.content[0]).toEqual(whole.content[0]);
    expect(whole.usage.output_tokens).toBeGreaterThan(0);
    expect(streamed.usage.cache_read_input_tokens).toBeGreaterThan(0);
  });

  it('answers a bad Messages request with a 400 the SDK raises as BadRequestError (the router keeps its OpenAI error shape)', async () => {
    const error = await client.messages
      .create({ model: 'test-model', max_tokens: 0, messages: [{ role: 'user', content: 'x' }] })
      .catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(Anthropic.BadRequestError);
    expect((error as InstanceType<typeof Anthropic.BadRequestError>).status).toBe(400);
    expect(String((error as Error).message)).toContain('max_tokens');
    const unknown = await client.messages
      .create({ model: 'no-such-model', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] })
      .catch((caught: unknown) => caught);
    expect(unknown).toBeInstanceOf(Anthropic.NotFoundError);
  });
});
