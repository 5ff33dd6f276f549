import type { ResponsesRequest } from '@kvroute/protocols';
import { describe, expect, it } from 'vitest';
import { renderRoutingText } from './routing-text';
import { buildRoutingRequest } from './routing-request';
import { responsesRoutingBody } from './responses-routing';

const INSTRUCTIONS = 'You are a careful coding agent. '.repeat(20);
const TOOLS = [
  {
    type: 'function',
    name: 'read_file',
    description: 'Read a file',
    parameters: { type: 'object', properties: { path: { type: 'string' } } },
  },
];

function agentTurn(items: number): ResponsesRequest {
  const input: ResponsesRequest['input'] = [
    { role: 'user', content: [{ type: 'input_text', text: 'Fix the failing test.' }] },
  ];
  for (let step = 0; step < items; step++) {
    input.push({
      type: 'function_call',
      call_id: `call_${step}`,
      name: 'read_file',
      arguments: `{"path":"src/file${step}.ts"}`,
    });
    input.push({
      type: 'function_call_output',
      call_id: `call_${step}`,
      output: `contents of file ${step} `.repeat(5),
    });
  }
  return { model: 'qwen', instructions: INSTRUCTIONS, tools: TOOLS, input };
}

describe('responsesRoutingBody', () => {
  it('renders instructions, tools and every input item, so a chain of agent steps is prefix-stable', () => {
    let previous = buildRoutingRequest(responsesRoutingBody(agentTurn(0)), { blockSizeBytes: 64 });
    for (let steps = 1; steps <= 4; steps++) {
      const next = buildRoutingRequest(responsesRoutingBody(agentTurn(steps)), { blockSizeBytes: 64 });
      expect(next.blockHashes.slice(0, previous.blockHashes.length)).toEqual(previous.blockHashes);
      expect(next.blockHashes.length).toBeGreaterThan(previous.blockHashes.length);
      previous = next;
    }
  });

  it('keeps what shapes the prompt: instructions, tool definitions, call names, arguments and outputs', () => {
    const text = renderRoutingText(responsesRoutingBody(agentTurn(1))).text;
    for (const piece of [
      'careful coding agent',
      'read_file',
      'src/file0.ts',
      'contents of file 0',
      'Fix the failing test.',
    ])
      expect(text).toContain(piece);
  });

  it('renders a string input as the equivalent chat request does', () => {
    const responses = renderRoutingText(
      responsesRoutingBody({ model: 'm', instructions: 'Be brief.', input: 'hello' }),
    ).text;
    const chat = renderRoutingText({
      model: 'm',
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'hello' },
      ],
    }).text;
    expect(responses).toBe(chat);
  });

  it('tells different instructions apart, and carries cache_salt, user, prompt_cache_key and max_output_tokens', () => {
    const a = renderRoutingText(responsesRoutingBody({ model: 'm', instructions: 'A', input: 'x' })).text;
    const b = renderRoutingText(responsesRoutingBody({ model: 'm', instructions: 'B', input: 'x' })).text;
    expect(a).not.toBe(b);
    const body = responsesRoutingBody({
      model: 'm',
      input: 'x',
      cache_salt: 'salt',
      user: 'u',
      max_output_tokens: 9,
      prompt_cache_key: 'k',
    } as ResponsesRequest);
    expect(body).toMatchObject({ cache_salt: 'salt', user: 'u', max_completion_tokens: 9, prompt_cache_key: 'k' });
    expect(buildRoutingRequest(body, { blockSizeBytes: 64 }).sessionKey).toBe('k');
  });

  it('renders unknown item types and roles without failing', () => {
    const body = responsesRoutingBody({
      model: 'm',
      input: [{ type: 'web_search_call', status: 'completed' } as never, { role: 'ipython', content: 'out' }],
    });
    expect(body.messages.map((message) => message.role)).toEqual(['user', 'user']);
    expect(renderRoutingText(body).text).toContain('web_search_call');
  });

  it('leaves reasoning items out, as the engine leaves earlier reasoning out of the prompt', () => {
    const body = responsesRoutingBody({
      model: 'm',
      input: [
        { role: 'user', content: 'hi' },
        { type: 'reasoning', summary: [] } as never,
        { role: 'user', content: 'more' },
      ],
    });
    expect(body.messages.map((message) => message.content)).toEqual(['hi', 'more']);
  });

  it('renders function tools as the equivalent chat request does (the chat form vLLM converts them to); hosted tools add nothing', () => {
    const responses = renderRoutingText(
      responsesRoutingBody({ model: 'm', input: 'hello', tools: [...TOOLS, { type: 'web_search_preview' }] }),
    ).text;
    const chat = renderRoutingText({
      model: 'm',
      messages: [{ role: 'user', content: 'hello' }],
      tools: [
        {
          type: 'function',
          function: { name: 'read_file', description: 'Read a file', parameters: TOOLS[0]?.parameters },
        },
      ],
    }).text;
    expect(responses).toBe(chat);
    const hostedOnly = responsesRoutingBody({ model: 'm', input: 'hello', tools: [{ type: 'web_search_preview' }] });
    expect(hostedOnly.tools).toBeUndefined();
  });
});
