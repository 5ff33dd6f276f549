import { describe, expect, it } from 'vitest';
import { EngineError } from '../engine-errors';
import { responsesChatTools } from '@kvroute/protocols';
import {
  ChoiceTurn,
  messagesTurnRequest,
  planTurn,
  responsesTurnRequest,
  turnEnd,
  type AgentSettings,
  type TurnRequest,
} from './agent-turn';

const settings: AgentSettings = { seed: 0, toolCallProbability: 0.5, reasoningTokens: 0 };
const tools = [
  {
    type: 'function',
    function: { name: 'search', parameters: { type: 'object', properties: { query: { type: 'string' } } } },
  },
  {
    type: 'function',
    function: {
      name: 'get_weather',
      parameters: { type: 'object', properties: { unit: {}, city: {} }, required: ['city'] },
    },
  },
];
const request = (overrides: Partial<TurnRequest> = {}): TurnRequest => ({
  tools,
  toolChoice: undefined,
  enableThinking: undefined,
  promptTokens: [1, 2, 3],
  ...overrides,
});

describe('planTurn', () => {
  it('never calls with tool_choice "none" or without tools', () => {
    expect(planTurn(settings, request({ toolChoice: 'none' })).toolCall).toBeNull();
    expect(planTurn({ ...settings, toolCallProbability: 1 }, request({ tools: undefined })).toolCall).toBeNull();
    expect(planTurn({ ...settings, toolCallProbability: 1 }, request({ tools: [] })).toolCall).toBeNull();
  });

  it('always calls the first tool with "required" and the named one with a named choice', () => {
    const never = { ...settings, toolCallProbability: 0 };
    expect(planTurn(never, request({ toolChoice: 'required' })).toolCall).toEqual({
      name: 'search',
      argumentKey: 'query',
    });
    expect(
      planTurn(never, request({ toolChoice: { type: 'function', function: { name: 'get_weather' } } })).toolCall,
    ).toEqual({ name: 'get_weather', argumentKey: 'city' });
  });

  it('answers 400 as vLLM does for a named tool that is not offered, or a forced choice without tools', () => {
    expect(() =>
      planTurn(settings, request({ toolChoice: { type: 'function', function: { name: 'missing' } } })),
    ).toThrow(EngineError);
    expect(() => planTurn(settings, request({ tools: undefined, toolChoice: 'required' }))).toThrow(
      '`tools` must be set',
    );
  });

  it('"auto" (or absent) follows toolCallProbability, deterministically per prompt and seed', () => {
    const prompts = Array.from({ length: 400 }, (_, index) => [index, index * 7, 42]);
    const decide = (probability: number, seed = 0): boolean[] =>
      prompts.map(
        (promptTokens) =>
          planTurn(
            { ...settings, seed, toolCallProbability: probability },
            request({ promptTokens, toolChoice: 'auto' }),
          ).toolCall !== null,
      );
    expect(decide(0).every((called) => !called)).toBe(true);
    expect(decide(1).every((called) => called)).toBe(true);
    const half = decide(0.5);
    expect(decide(0.5)).toEqual(half);
    const share = half.filter(Boolean).length / half.length;
    expect(share).toBeGreaterThan(0.4);
    expect(share).toBeLessThan(0.6);
    expect(decide(0.5, 1)).not.toEqual(half);
    // Absent tool_choice means auto.
    expect(prompts.map((promptTokens) => planTurn(settings, request({ promptTokens })).toolCall !== null)).toEqual(
      half,
    );
  });

  it('reasons for reasoningTokens unless the request turns thinking off', () => {
    expect(planTurn({ ...settings, reasoningTokens: 4 }, request({ toolChoice: 'none' })).reasoningTokens).toBe(4);
    expect(
      planTurn({ ...settings, reasoningTokens: 4 }, request({ toolChoice: 'none', enableThinking: false }))
        .reasoningTokens,
    ).toBe(0);
  });
});

describe('ChoiceTurn', () => {
  const words = [' alpha', ' beta', ' gamma', ' delta', ' eps'];
  const run = (turn: ChoiceTurn) =>
    words.slice(0, turn.outputTokens).flatMap((word, index) => turn.pieces(index, word));

  it('emits reasoning, then the tool header, then one argument piece per token, closing the JSON on the last', () => {
    const turn = new ChoiceTurn({ reasoningTokens: 2, toolCall: { name: 'search', argumentKey: 'query' } }, 5);
    const pieces = run(turn);
    expect(pieces.map((piece) => piece.kind)).toEqual([
      'reasoning',
      'reasoning',
      'tool-start',
      'tool-arguments',
      'tool-arguments',
    ]);
    expect(JSON.parse(turn.toolArguments)).toEqual({ query: 'delta eps' });
    expect(turn.finishReason('stop')).toBe('tool_calls');
    expect(turn.message()).toMatchObject({
      reasoning_content: ' alpha beta',
      content: null,
      tool_calls: [{ type: 'function', function: { name: 'search' } }],
    });
  });

  it('a one-token call emits its header and whole arguments in the same step', () => {
    const turn = new ChoiceTurn({ reasoningTokens: 0, toolCall: { name: 'search', argumentKey: 'query' } }, 1);
    expect(run(turn).map((piece) => piece.kind)).toEqual(['tool-start', 'tool-arguments']);
    expect(JSON.parse(turn.toolArguments)).toEqual({ query: 'alpha' });
  });

  it('a turn cut inside its reasoning has no answer and keeps the engine finish reason', () => {
    const turn = new ChoiceTurn({ reasoningTokens: 4, toolCall: { name: 'search', argumentKey: 'query' } }, 3);
    expect(run(turn).every((piece) => piece.kind === 'reasoning')).toBe(true);
    expect(turn.finishReason('length')).toBe('length');
    expect(turn.message()).toMatchObject({ content: null, tool_calls: [] });
  });
});

describe('one plan for every endpoint', () => {
  const always = { ...settings, toolCallProbability: 1, reasoningTokens: 2 };
  const flatTools = [
    { type: 'function', name: 'search', parameters: { type: 'object', properties: { query: {} } } },
    { type: 'web_search_preview' },
    {
      type: 'function',
      name: 'get_weather',
      parameters: { type: 'object', properties: { city: {} }, required: ['city'] },
    },
  ];

  it('reads Responses tools (flat, hosted ones never called) and tool_choice into the same decision as chat', () => {
    const named = planTurn(
      always,
      responsesTurnRequest(
        { tool_choice: { type: 'function', name: 'get_weather' } },
        responsesChatTools(flatTools),
        [1, 2, 3],
      ),
    );
    expect(named).toEqual(
      planTurn(always, request({ toolChoice: { type: 'function', function: { name: 'get_weather' } } })),
    );
    expect(
      planTurn(always, responsesTurnRequest({ tool_choice: 'none' }, responsesChatTools(flatTools), [1, 2, 3]))
        .toolCall,
    ).toBeNull();
    // A hosted tool's choice leaves the decision to the draw.
    expect(
      planTurn(
        always,
        responsesTurnRequest({ tool_choice: { type: 'web_search_preview' } }, responsesChatTools(flatTools), [1, 2, 3]),
      ).toolCall,
    ).not.toBeNull();
    expect(() =>
      planTurn(
        always,
        responsesTurnRequest({ tool_choice: { type: 'function', name: 'nope' } }, responsesChatTools(flatTools), [1]),
      ),
    ).toThrow(EngineError);
  });

  it("maps Anthropic's tool_choice as vLLM does (any → required, tool → named), and thinking disabled skips reasoning", () => {
    expect(
      planTurn(always, messagesTurnRequest({ tool_choice: { type: 'any' } }, tools, [1, 2, 3])).toolCall?.name,
    ).toBe('search');
    expect(
      planTurn(always, messagesTurnRequest({ tool_choice: { type: 'tool', name: 'get_weather' } }, tools, [1, 2, 3]))
        .toolCall?.name,
    ).toBe('get_weather');
    expect(
      planTurn(always, messagesTurnRequest({ tool_choice: { type: 'none' } }, tools, [1, 2, 3])).toolCall,
    ).toBeNull();
    expect(
      planTurn(always, messagesTurnRequest({ thinking: { type: 'disabled' } }, tools, [1, 2, 3])).reasoningTokens,
    ).toBe(0);
    expect(
      planTurn(always, messagesTurnRequest({ thinking: { type: 'enabled' } }, tools, [1, 2, 3])).reasoningTokens,
    ).toBe(2);
  });

  it('turnEnd: a call ends at EOS; text cut by max_tokens ends at length; a call cut inside the reasoning too', () => {
    const call = { reasoningTokens: 2, toolCall: { name: 'search', argumentKey: 'query' } };
    expect(turnEnd(call, 8, 8)).toBe('stop');
    expect(turnEnd(call, 2, 2)).toBe('length');
    expect(turnEnd({ reasoningTokens: 0, toolCall: null }, 8, 8)).toBe('length');
    expect(turnEnd({ reasoningTokens: 0, toolCall: null }, 5, 8)).toBe('stop');
  });
});
