import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestCluster, totalInflight, waitFor, type TestCluster } from './start-test-cluster';

/**
 * Agent turns on the Responses and Anthropic Messages APIs through the router, with the official
 * clients and vllm-sim backends that reason first and then call a tool (the sim's shared agent plan):
 * a stream whose first output is reasoning, then a call, records a TTFT like a text stream does, and
 * the follow-up that carries the call's result (`function_call_output` after `previous_response_id`;
 * a `tool_result` block) lands on the backend that holds the conversation and reads it from its cache.
 */
const INSTRUCTIONS = `You are an on-call agent. ${'Use the tools, then answer in one sentence. '.repeat(30)}`;

describe('Responses and Messages agent turns through the router', () => {
  let cluster: TestCluster;
  beforeAll(async () => {
    cluster = await startTestCluster({
      backends: 2,
      sim: { reasoningTokens: 3, toolCallProbability: 1, promptTokensDetails: true },
    });
  });
  afterAll(() => cluster?.close());

  const ttftCount = async (): Promise<number> => {
    const metrics = await (await fetch(`${cluster.opsUrl}/metrics`)).text();
    return metrics
      .split('\n')
      .filter((line) => line.startsWith('kvroute_router_time_to_first_token_seconds_count'))
      .reduce((total, line) => total + Number(line.slice(line.lastIndexOf(' ') + 1)), 0);
  };

  it(
    'Responses: a reasoning-then-function_call stream records a TTFT; the function_call_output ' +
      'follow-up stays on its backend and hits the cache',
    async () => {
      const client = new OpenAI({ baseURL: `${cluster.routerUrl}/v1`, apiKey: 'unused', maxRetries: 0 });
      const tools: OpenAI.Responses.FunctionTool[] = [
        {
          type: 'function',
          name: 'search_docs',
          parameters: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] },
          strict: false,
        },
      ];
      const before = await ttftCount();
      const { data: stream, response } = await client.responses
        .create({
          model: 'test-model',
          instructions: INSTRUCTIONS,
          input: 'Where is the failover runbook?',
          tools,
          stream: true,
          max_output_tokens: 8,
        })
        .withResponse();
      const backend = response.headers.get('x-router-backend');
      const types: string[] = [];
      let completed: OpenAI.Responses.Response | null = null;
      for await (const event of stream) {
        types.push(event.type);
        if (event.type === 'response.completed') completed = event.response;
      }
      // The first output is reasoning, then the call.
      expect(types.find((type) => type.endsWith('.delta'))).toBe('response.reasoning_text.delta');
      expect(types).toContain('response.function_call_arguments.delta');
      const call = completed?.output.find((item) => item.type === 'function_call');
      if (call?.type !== 'function_call' || completed === null) throw new Error('no function call');
      expect(await ttftCount()).toBe(before + 1);

      const { data: followUp, response: followUpResponse } = await client.responses
        .create({
          model: 'test-model',
          instructions: INSTRUCTIONS,
          previous_response_id: completed.id,
          input: [{ type: 'function_call_output', call_id: call.call_id, output: 'docs/runbooks/failover.md' }],
          tools,
          max_output_tokens: 8,
        })
        .withResponse();
      expect(followUpResponse.headers.get('x-router-backend')).toBe(backend);
      expect(followUp.usage?.input_tokens).toBeGreaterThan(completed.usage?.input_tokens ?? 0);
      expect(followUp.usage?.input_tokens_details.cached_tokens).toBeGreaterThan(0);
      await waitFor(() => totalInflight(cluster.router) === 0);
    },
  );

  it('Messages: a thinking-then-tool_use stream records a TTFT; the tool_result follow-up stays on its backend and hits the cache', async () => {
    const client = new Anthropic({ baseURL: cluster.routerUrl, apiKey: 'unused', maxRetries: 0 });
    const tools: Anthropic.Messages.Tool[] = [
      {
        name: 'lookup_runbook',
        input_schema: { type: 'object', properties: { section: { type: 'string' } }, required: ['section'] },
      },
    ];
    const messages: Anthropic.Messages.MessageParam[] = [{ role: 'user', content: 'Which section covers failover?' }];
    const before = await ttftCount();
    const { data: stream, response } = await client.messages
      .create({ model: 'test-model', max_tokens: 8, system: INSTRUCTIONS, tools, messages, stream: true })
      .withResponse();
    const backend = response.headers.get('x-router-backend');
    const blocks: string[] = [];
    const toolUse = { id: '', name: '', json: '' };
    for await (const event of stream) {
      if (event.type === 'content_block_start') {
        blocks.push(event.content_block.type);
        if (event.content_block.type === 'tool_use')
          Object.assign(toolUse, { id: event.content_block.id, name: event.content_block.name });
      }
      if (event.type === 'content_block_delta' && event.delta.type === 'input_json_delta')
        toolUse.json += event.delta.partial_json;
    }
    expect(blocks).toEqual(['thinking', 'tool_use']);
    expect(await ttftCount()).toBe(before + 1);

    messages.push({
      role: 'assistant',
      content: [
        {
          type: 'tool_use',
          id: toolUse.id,
          name: toolUse.name,
          input: JSON.parse(toolUse.json) as Record<string, unknown>,
        },
      ],
    });
    messages.push({
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: toolUse.id, content: 'Section 4.2: fail over to the standby region.' },
      ],
    });
    const { data: followUp, response: followUpResponse } = await client.messages
      .create({ model: 'test-model', max_tokens: 8, system: INSTRUCTIONS, tools, messages })
      .withResponse();
    expect(followUpResponse.headers.get('x-router-backend')).toBe(backend);
    expect(followUp.usage.cache_read_input_tokens).toBeGreaterThan(0);
    await waitFor(() => totalInflight(cluster.router) === 0);
  });
});
