import { createServer, type IncomingMessage, type Server } from 'node:http';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  AGENTIC_DEFAULTS,
  generateAgentSessions,
  SEED_SESSIONS,
  generateSessions,
  type CompletionEvent,
  type WorkloadMessage,
} from '../workloads';
import { driveWorkload, requestCount } from './drive-workload';
import { createClientAgent } from './request-client';

/**
 * A loopback OpenAI-style server that streams three content chunks per request (`r<n>-a`, `-b`, `-c`
 * with `delayMs` between them) and usage, and remembers every body and how many requests overlapped.
 * Agent requests (`tools`): with `enable_thinking`, a reasoning delta first; with a named `tool_choice`,
 * one call (id `call-r<n>`, the named tool, arguments `{"q": "r<n>"}` in two pieces, the header's
 * event split over two writes) instead of text, finish `tool_calls`. The first output event is followed
 * by a `FIRST_GAP_MS` pause, so TTFT taken at any later event shows.
 */
interface Received {
  readonly body: {
    messages?: WorkloadMessage[];
    prompt?: string;
    max_tokens: number;
    stream: boolean;
    tools?: unknown[];
    tool_choice?: string | { function: { name: string } };
    chat_template_kwargs?: { enable_thinking?: boolean };
  };
  readonly startedAt: number;
  endedAt: number;
}

let server: Server;
let baseUrl: string;
let received: Received[] = [];
let inflight = 0;
let maxInflightSeen = 0;
let delayMs = 5;
let failEvery = 0;
/** The n-th request (1-based) answers a named tool_choice with text: a stream without a call. */
let noCallAt = 0;
const FIRST_GAP_MS = 60;

const readBody = async (request: IncomingMessage): Promise<string> => {
  let text = '';
  for await (const chunk of request) text += chunk;
  return text;
};
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

beforeAll(async () => {
  server = createServer(async (request, response) => {
    const entry: Received = { body: JSON.parse(await readBody(request)), startedAt: performance.now(), endedAt: 0 };
    received.push(entry);
    const n = received.length;
    if (failEvery > 0 && n % failEvery === 0) {
      response.writeHead(400, { 'content-type': 'application/json' });
      response.end(JSON.stringify({ error: { message: `request ${n} refused`, type: 'invalid_request_error' } }));
      entry.endedAt = performance.now();
      return;
    }
    inflight++;
    maxInflightSeen = Math.max(maxInflightSeen, inflight);
    response.writeHead(200, {
      'content-type': 'text/event-stream',
      'x-router-backend': `b${n % 2}`,
      'x-router-reason': 'test',
    });
    response.write(`data: ${JSON.stringify({ choices: [{ delta: { role: 'assistant', content: '' } }] })}\n\n`);
    const { tools, tool_choice: choice, chat_template_kwargs: kwargs } = entry.body;
    if (tools !== undefined) {
      if (kwargs?.enable_thinking === true) {
        response.write(
          `data: ${JSON.stringify({ choices: [{ delta: { reasoning_content: 'hmm', reasoning: 'hmm' } }] })}\n\n`,
        );
        await sleep(FIRST_GAP_MS);
      }
      if (typeof choice === 'object' && n !== noCallAt) {
        const opening = {
          index: 0,
          id: `call-r${n}`,
          type: 'function',
          function: { name: choice.function.name, arguments: '' },
        };
        const header = `data: ${JSON.stringify({ choices: [{ delta: { tool_calls: [opening] } }] })}\n\n`;
        response.write(header.slice(0, 40));
        await sleep(1);
        response.write(header.slice(40));
        if (kwargs?.enable_thinking !== true) await sleep(FIRST_GAP_MS);
        for (const [index, piece] of ['{"q": "', `r${n}"}`].entries()) {
          await sleep(delayMs);
          response.write(
            `data: ${JSON.stringify({
              choices: [
                {
                  delta: { tool_calls: [{ index: 0, function: { arguments: piece } }] },
                  finish_reason: index === 1 ? 'tool_calls' : null,
                },
              ],
            })}\n\n`,
          );
        }
        response.write(
          `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 100, completion_tokens: 3 } })}\n\n`,
        );
        response.end('data: [DONE]\n\n');
        inflight--;
        entry.endedAt = performance.now();
        return;
      }
    }
    for (const part of ['a', 'b', 'c']) {
      await sleep(delayMs);
      const delta = entry.body.messages ? { delta: { content: `r${n}-${part} ` } } : { text: `r${n}-${part} ` };
      response.write(`data: ${JSON.stringify({ choices: [delta] })}\n\n`);
    }
    response.write(
      `data: ${JSON.stringify({ choices: [], usage: { prompt_tokens: 100, completion_tokens: 3, prompt_tokens_details: { cached_tokens: 40 } } })}\n\n`,
    );
    response.end('data: [DONE]\n\n');
    inflight--;
    entry.endedAt = performance.now();
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  baseUrl = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
});
afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));
beforeEach(() => {
  received = [];
  inflight = 0;
  maxInflightSeen = 0;
  delayMs = 5;
  failEvery = 0;
  noCallAt = 0;
});

const sessions = (count: number, turns: number) =>
  generateSessions({ ...SEED_SESSIONS, sessions: count, turns, startJitterMs: 10, thinkMs: 1, toolLoopProbability: 0 });

describe('driveWorkload: sessions (closed loop)', () => {
  it('sends each turn after the previous reply, with the real replies in the conversation, and times every request', async () => {
    const agent = createClientAgent();
    const workload = { kind: 'sessions' as const, sessions: sessions(2, 3) };
    const done: string[] = [];
    const result = await driveWorkload(workload, {
      routers: [baseUrl],
      model: 'm',
      agent,
      maxRunMs: 10_000,
      maxInflight: 10,
      onDone: (record) => done.push(record.id),
    });
    await agent.close();

    expect(requestCount(workload)).toBe(6);
    expect(result.requests).toHaveLength(6);
    expect(done.sort()).toEqual(['s0-t0', 's0-t1', 's0-t2', 's1-t0', 's1-t1', 's1-t2']);
    for (const record of result.requests) {
      expect(record.status).toBe(200);
      expect(record.ttftMs).toBeGreaterThan(0);
      expect(record.e2eMs).toBeGreaterThan(record.ttftMs as number);
      expect(record.itlMs).toHaveLength(2);
      expect(record).toMatchObject({ promptTokens: 100, cachedTokens: 40, completionTokens: 3, reason: 'test' });
      expect(record.backend).toMatch(/^b[01]$/);
    }
    // Turn 2 of each session carries both earlier replies as assistant messages, and was sent after turn 1 ended.
    const turnTwos = received.filter(
      (entry) => entry.body.messages?.filter((message) => message.role === 'assistant').length === 2,
    );
    expect(turnTwos).toHaveLength(2);
    for (const entry of turnTwos) {
      const replies = entry.body
        .messages!.filter((message) => message.role === 'assistant')
        .map((message) => message.content);
      for (const reply of replies) expect(reply).toMatch(/^r\d+-a r\d+-b r\d+-c $/);
      // Reply `r<n>-…` came from the n-th request the server received: the turn before this one.
      const previous = received[Number(/^r(\d+)-/.exec(replies[1]!)![1]) - 1];
      expect(previous?.body.messages?.filter((message) => message.role === 'assistant')).toHaveLength(1);
      expect(entry.startedAt).toBeGreaterThanOrEqual(previous!.endedAt);
    }
    expect(
      received.every((entry) => entry.body.stream === true && entry.body.max_tokens === SEED_SESSIONS.maxTokens),
    ).toBe(true);
  });

  it('serial: one session after another, each turn with the real replies, never two requests at once', async () => {
    const agent = createClientAgent();
    const noWait = { now: () => performance.now(), sleep: () => Promise.resolve() };
    const result = await driveWorkload(
      { kind: 'sessions', sessions: sessions(3, 2) },
      { routers: [baseUrl], model: 'm', agent, maxRunMs: Infinity, maxInflight: 1, clock: noWait, serial: true },
    );
    await agent.close();
    expect(result.requests.map((record) => record.id)).toEqual(['s0-t0', 's0-t1', 's1-t0', 's1-t1', 's2-t0', 's2-t1']);
    expect(maxInflightSeen).toBe(1);
    expect(
      received[1]?.body.messages?.filter((message) => message.role === 'assistant').map((message) => message.content),
    ).toEqual(['r1-a r1-b r1-c ']);
  });

  it('spreads requests over the routers in turn', async () => {
    const agent = createClientAgent();
    const result = await driveWorkload(
      { kind: 'sessions', sessions: sessions(2, 2) },
      { routers: [baseUrl, baseUrl, baseUrl], model: 'm', agent, maxRunMs: 10_000, maxInflight: 10 },
    );
    await agent.close();
    // Four requests over three routers, one each in turn: 0, 1, 2, 0.
    expect(result.requests.map((record) => record.router).sort()).toEqual([0, 0, 1, 2]);
  });

  it('records a refused request with its status and message, and the session goes on with the placeholder reply', async () => {
    failEvery = 2;
    const agent = createClientAgent();
    const result = await driveWorkload(
      { kind: 'sessions', sessions: sessions(1, 3) },
      { routers: [baseUrl], model: 'm', agent, maxRunMs: 10_000, maxInflight: 10 },
    );
    await agent.close();
    const refused = result.requests.find((record) => record.status === 400);
    expect(refused).toMatchObject({ id: 's0-t1', error: 'request 2 refused', promptTokens: 0 });
    expect(refused?.ttftMs).toBeUndefined();
    const last = received[2]!.body
      .messages!.filter((message) => message.role === 'assistant')
      .map((message) => message.content);
    expect(last).toEqual(['r1-a r1-b r1-c ', 'ack t1']);
  });
});

describe('driveWorkload: agent sessions (closed loop, request by request)', () => {
  const agentSessions = (count: number, reasoningProbability: number) =>
    generateAgentSessions({
      ...AGENTIC_DEFAULTS,
      seed: 3,
      sessions: count,
      turns: 2,
      systemPromptBytes: 200,
      taskBytes: 100,
      userTurnBytes: 20,
      toolResultBytes: [50, 80],
      toolRounds: [1, 2],
      startJitterMs: 10,
      thinkMs: 1,
      toolMs: 1,
      reasoningProbability,
    });
  const requestOf = (id: string) => received[Number(/^call-r(\d+)$/.exec(id)?.[1]) - 1];

  it(
    "sends each streamed call back, by the id the stream gave it, with the round's result, then " +
      'the answer; TTFT at the first output of any kind',
    async () => {
      const agent = createClientAgent();
      const sessions = agentSessions(2, 0.5);
      const workload = { kind: 'agentic' as const, sessions, events: [] };
      const result = await driveWorkload(workload, {
        routers: [baseUrl],
        model: 'm',
        agent,
        maxRunMs: 10_000,
        maxInflight: 10,
      });
      await agent.close();

      expect(requestCount(workload)).toBe(received.length);
      expect(result.requests).toHaveLength(received.length);
      for (const record of result.requests) {
        expect(record).toMatchObject({
          status: 200,
          finishReason: record.id.endsWith('-a') ? undefined : 'tool_calls',
        });
        expect(record.error).toBeUndefined();
        expect(record.ttftMs).toBeGreaterThan(0);
      }
      // A tool round's first output (its reasoning delta, else the call's header) comes FIRST_GAP_MS before the rest of the
      // stream: TTFT taken at it is at least half that gap before the end (half: a busy machine may deliver the first
      // chunk late, and a TTFT taken at a later event would be within a few ms of the end).
      const calls = result.requests.filter((record) => !record.id.endsWith('-a'));
      for (const record of calls) expect(record.ttftMs as number).toBeLessThan(record.e2eMs - FIRST_GAP_MS / 2);
      // Thinking is asked for on the first request of the reasoning turns only.
      const thinking = new Set(
        sessions.flatMap((session) =>
          session.turns.filter((turn) => turn.reasoning).map((turn) => `${session.id}-t${turn.turn}-c0`),
        ),
      );
      expect(thinking.size).toBeGreaterThan(0);
      expect(received.filter((entry) => entry.body.chat_template_kwargs?.enable_thinking === true)).toHaveLength(
        thinking.size,
      );
      let toolMessages = 0;
      for (const entry of received) {
        const messages = entry.body.messages ?? [];
        expect(entry.body).toMatchObject({ stream: true, tools: expect.any(Array) });
        messages.forEach((message, index) => {
          if (message.role !== 'tool') return;
          toolMessages++;
          const call = messages[index - 1]?.tool_calls?.[0];
          expect(call?.id).toBe(message.tool_call_id);
          // The call is the one the server streamed for an earlier request: its id, the tool that request named, the arguments it streamed.
          const source = requestOf(call?.id ?? '');
          expect(source).toBeDefined();
          expect(source!.startedAt).toBeLessThan(entry.startedAt);
          expect(source!.endedAt).toBeLessThanOrEqual(entry.startedAt);
          expect(call?.function.name).toBe((source!.body.tool_choice as { function: { name: string } }).function.name);
          expect(call?.function.arguments).toBe(`{"q": "${call?.id.slice('call-'.length)}"}`);
        });
        // Earlier turns' answers are the text the server streamed.
        for (const message of messages.filter((m) => m.role === 'assistant' && m.tool_calls === undefined))
          expect(message.content).toMatch(/^r\d+-a r\d+-b r\d+-c $/);
      }
      expect(toolMessages).toBeGreaterThan(calls.length);
    },
  );

  it('records a tool round whose stream had no call, and goes on with the placeholder call', async () => {
    noCallAt = 1;
    const agent = createClientAgent();
    const sessions = agentSessions(1, 0);
    const result = await driveWorkload(
      { kind: 'agentic', sessions, events: [] },
      { routers: [baseUrl], model: 'm', agent, maxRunMs: 10_000, maxInflight: 10 },
    );
    await agent.close();
    expect(result.requests[0]).toMatchObject({ id: 's0-t0-c0', status: 200, error: 'the stream carried no tool call' });
    const placeholder = sessions[0]!.turns[0]!.rounds[0]!.placeholderCall;
    expect(received[1]!.body.messages!.slice(2, 4)).toEqual([
      { role: 'assistant', content: null, tool_calls: [placeholder] },
      { role: 'tool', tool_call_id: placeholder.id, content: sessions[0]!.turns[0]!.rounds[0]!.result },
    ]);
    expect(result.requests.slice(1).every((record) => record.error === undefined)).toBe(true);
  });
});

describe('driveWorkload: events (open loop)', () => {
  const events = (count: number, gapMs: number): CompletionEvent[] =>
    Array.from({ length: count }, (_, index) => ({
      id: `p${index}`,
      atMs: index * gapMs,
      kind: 'completion',
      maxTokens: 8,
      prompt: `prompt ${index}`,
    }));

  it('sends at the arrival offsets whatever is in flight, bounded by maxInflight', async () => {
    delayMs = 30;
    const agent = createClientAgent();
    const unbounded = await driveWorkload(
      { kind: 'events', events: events(6, 5) },
      { routers: [baseUrl], model: 'm', agent, maxRunMs: 10_000, maxInflight: 100 },
    );
    const overlapUnbounded = maxInflightSeen;
    maxInflightSeen = 0;
    const bounded = await driveWorkload(
      { kind: 'events', events: events(6, 5) },
      { routers: [baseUrl], model: 'm', agent, maxRunMs: 10_000, maxInflight: 2 },
    );
    await agent.close();
    expect(unbounded.requests).toHaveLength(6);
    expect(bounded.requests).toHaveLength(6);
    // Each request takes ≥ 90 ms and they arrive 5 ms apart: open loop overlaps them all, the bound holds 2.
    expect(overlapUnbounded).toBeGreaterThan(2);
    expect(maxInflightSeen).toBe(2);
    expect(received.filter((entry) => entry.body.prompt === 'prompt 3')).toHaveLength(2);
  });

  it('stops sending at the deadline, lets what is in flight finish and counts the rest as skipped', async () => {
    const agent = createClientAgent();
    const result = await driveWorkload(
      { kind: 'events', events: events(10, 40) },
      { routers: [baseUrl], model: 'm', agent, maxRunMs: 100, maxInflight: 100 },
    );
    await agent.close();
    expect(result.requests.length).toBeGreaterThan(0);
    expect(result.requests.length).toBeLessThan(10);
    expect(result.requests.length + result.skipped).toBe(10);
    expect(result.requests.every((record) => record.status === 200)).toBe(true);
  });
});
