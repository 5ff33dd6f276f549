import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { startTestCluster, totalInflight, waitFor } from './start-test-cluster';

/**
 * Agent traffic through the router, end to end with vllm-sim backends and the official `openai`
 * client: streamed turns whose first output is a tool call or reasoning count as started (time to
 * first token, prefix ownership) exactly as text turns do, and the engines' cached tokens confirm the
 * router's predictions turn after turn.
 */
describe('agent turns through the router', () => {
  it('measures TTFT and records ownership for every tool-call-first and reasoning-first stream, and the engines confirm its predictions', async () => {
    const cluster = await startTestCluster({ backends: 2, sim: { reasoningTokens: 3, toolCallProbability: 1 } });
    try {
      const client = new OpenAI({ baseURL: `${cluster.routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
      const tools = [
        {
          type: 'function' as const,
          function: {
            name: 'search_docs',
            parameters: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] },
          },
        },
      ];
      const conversations = 3;
      const turns = 3;
      const backendsByConversation: string[][] = [];
      for (let conversation = 0; conversation < conversations; conversation++) {
        const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
          {
            role: 'system',
            content: `You are agent ${conversation}. ${'Use the tools to answer precisely. '.repeat(30)}`,
          },
          { role: 'user', content: `Question ${conversation}: where is the configuration documented?` },
        ];
        const homes: string[] = [];
        for (let turn = 0; turn < turns; turn++) {
          const { data: stream, response } = await client.chat.completions
            .create({
              model: 'test-model',
              messages,
              tools,
              stream: true,
              max_tokens: 8,
              stream_options: { include_usage: true },
            })
            .withResponse();
          homes.push(response.headers.get('x-router-backend') ?? '');
          let firstOutput: 'reasoning' | 'tool call' | 'text' | null = null;
          const call = { id: '', name: '', arguments: '' };
          for await (const chunk of stream) {
            const delta = chunk.choices[0]?.delta as
              | (OpenAI.Chat.ChatCompletionChunk.Choice.Delta & { reasoning_content?: string })
              | undefined;
            if (delta === undefined) continue;
            if (firstOutput === null && delta.reasoning_content) firstOutput = 'reasoning';
            const piece = delta.tool_calls?.[0];
            if (piece) {
              firstOutput ??= 'tool call';
              call.id ||= piece.id ?? '';
              call.name ||= piece.function?.name ?? '';
              call.arguments += piece.function?.arguments ?? '';
            }
            if (firstOutput === null && delta.content) firstOutput = 'text';
          }
          expect(firstOutput).toBe('reasoning');
          expect(call.name).toBe('search_docs');
          messages.push({
            role: 'assistant',
            content: null,
            tool_calls: [{ id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } }],
          });
          messages.push({
            role: 'tool',
            tool_call_id: call.id,
            content: `result ${turn}: docs/configuration.md lists every key.`,
          });
        }
        backendsByConversation.push(homes);
      }
      const streams = conversations * turns;
      const metrics = await (await fetch(`${cluster.opsUrl}/metrics`)).text();
      const sum = (name: string): number =>
        metrics
          .split('\n')
          .filter((line) => line.startsWith(name))
          .reduce((total, line) => total + Number(line.slice(line.lastIndexOf(' ') + 1)), 0);
      // Every stream started (its first output was reasoning, then a tool call): TTFT measured for each.
      expect(sum('kvroute_router_time_to_first_token_seconds_count')).toBe(streams);
      // Ownership recorded at the first output: every later turn of a conversation stays on its backend.
      for (const homes of backendsByConversation) expect(new Set(homes).size, JSON.stringify(homes)).toBe(1);
      // The engines' cached tokens were checked for every stream and confirmed the router's picture;
      // only each backend's very first answer is unverified (vLLM leaves the figure out when it is 0,
      // so an absent figure means 0 only once a backend has been seen reporting one).
      const outcome = (name: string): number =>
        metrics
          .split('\n')
          .filter(
            (line) => line.startsWith('kvroute_router_prefix_predictions_total') && line.includes(`outcome="${name}"`),
          )
          .reduce((total, line) => total + Number(line.slice(line.lastIndexOf(' ') + 1)), 0);
      expect(outcome('confirmed') + outcome('unverified')).toBe(streams);
      expect(outcome('unverified')).toBeLessThanOrEqual(2);
      const predicted = sum('kvroute_router_prefix_predicted_tokens_total');
      const observed = sum('kvroute_router_prefix_observed_cached_tokens_total');
      expect(predicted).toBeGreaterThan(0);
      expect(Math.abs(predicted - observed) / observed).toBeLessThan(0.05);
      await waitFor(() => totalInflight(cluster.router) === 0);
    } finally {
      await cluster.close();
    }
  }, 60_000);
});
