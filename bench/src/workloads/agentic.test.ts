import { describe, expect, it } from 'vitest';
import type { AgenticOptions, AgentSession } from './agentic';
import {
  AGENT_TOOLS,
  AGENTIC_DEFAULTS,
  agentEvents,
  agentRequest,
  agentRequestCount,
  agentRequests,
  generateAgentSessions,
} from './agentic';
import { eventsFromJsonl, eventsToJsonl, type WorkloadMessage, type WorkloadToolCall } from './events';

const OPTIONS: AgenticOptions = { ...AGENTIC_DEFAULTS, seed: 5, sessions: 4, turns: 4 };

const only = (sessions: AgentSession[]): AgentSession => {
  const [session] = sessions;
  if (session === undefined) throw new Error('no session');
  return session;
};

/** Every assistant message with tool_calls is followed by one tool message per call, answering it by id. */
function expectCallsAnswered(messages: readonly WorkloadMessage[]): void {
  messages.forEach((message, index) => {
    if (message.role === 'tool')
      expect(messages[index - 1]?.tool_calls?.map((call) => call.id)).toContain(message.tool_call_id);
    if (message.tool_calls === undefined) return;
    expect(message).toMatchObject({ role: 'assistant', content: null });
    expect(message.tool_calls).toHaveLength(1);
    expect(messages[index + 1]).toMatchObject({ role: 'tool', tool_call_id: message.tool_calls[0]?.id });
  });
}

describe('agentic sessions', () => {
  it('is deterministic from the seed: same seed, byte-identical trace; another seed, another; session k whatever S is', () => {
    const trace = eventsToJsonl(agentEvents(generateAgentSessions(OPTIONS)));
    expect(eventsToJsonl(agentEvents(generateAgentSessions(OPTIONS)))).toBe(trace);
    expect(eventsToJsonl(agentEvents(generateAgentSessions({ ...OPTIONS, seed: 6 })))).not.toBe(trace);
    expect(generateAgentSessions({ ...OPTIONS, sessions: 9 })[2]).toEqual(generateAgentSessions(OPTIONS)[2]);
    // The trace holds everything a replay needs: tools, tool choice, thinking, calls and their ids.
    const back = eventsFromJsonl(trace);
    expect(back).toEqual(agentEvents(generateAgentSessions(OPTIONS)));
    expect(eventsToJsonl(back)).toBe(trace);
  });

  it('shares the system prompt and tools byte for byte; each session has a task of its own', () => {
    const sessions = generateAgentSessions(OPTIONS);
    const events = agentEvents(sessions);
    expect(events).toHaveLength(sessions.reduce((sum, session) => sum + agentRequestCount(session), 0));
    expect(new Set(events.map((event) => event.messages[0]?.content)).size).toBe(1);
    expect(events[0]?.messages[0]?.content).toHaveLength(6144);
    expect(events.every((event) => event.agent?.tools === AGENT_TOOLS && event.kind === 'chat')).toBe(true);
    const tasks = sessions.map((session) => session.turns[0]?.user ?? '');
    expect(new Set(tasks).size).toBe(sessions.length);
    expect(
      tasks.every(
        (task, index) => task.startsWith(`task ${index}: `) && task.length === `task ${index}: `.length + 8192,
      ),
    ).toBe(true);
  });

  it('makes each turn K tool rounds, each a call then its result, then an answer; every request carries the whole history', () => {
    for (const session of generateAgentSessions(OPTIONS)) {
      let previous: WorkloadMessage[] | undefined;
      for (const turn of session.turns) {
        const roundCount = turn.rounds.length;
        expect(roundCount).toBeGreaterThanOrEqual(1);
        expect(roundCount).toBeLessThanOrEqual(4);
        for (let round = 0; round <= roundCount; round++) {
          const request = agentRequest(session, turn.turn, round);
          expectCallsAnswered(request.messages);
          expect(request.messages[0]?.role).toBe('system');
          if (previous !== undefined) {
            // The history grows: the previous request is a prefix of this one, and exactly one step was added.
            expect(request.messages.slice(0, previous.length)).toEqual(previous);
            const added = request.messages.slice(previous.length);
            if (round === 0) {
              expect(added.map((m) => m.role)).toEqual(['assistant', 'user']);
              expect(added[0]?.tool_calls).toBeUndefined();
              expect(added[0]?.content).toBe(session.turns[turn.turn - 1]?.placeholderAnswer);
              expect(added[1]?.content).toMatch(new RegExp(`^turn ${turn.turn}: `));
            } else {
              const spec = turn.rounds[round - 1];
              expect(added).toEqual([
                { role: 'assistant', content: null, tool_calls: [spec?.placeholderCall] },
                { role: 'tool', tool_call_id: spec?.placeholderCall.id, content: spec?.result },
              ]);
              expect(spec?.placeholderCall.function.name).toBe(spec?.tool);
            }
          }
          if (round < roundCount) {
            expect(request.isAnswer).toBe(false);
            expect(request.agent.toolChoice).toEqual({
              type: 'function',
              function: { name: turn.rounds[round]?.tool },
            });
            expect(request.id).toBe(`${session.id}-t${turn.turn}-c${round}`);
          } else {
            expect(request.isAnswer).toBe(true);
            expect(request.agent.toolChoice).toBe('none');
            expect(request.id).toBe(`${session.id}-t${turn.turn}-a`);
          }
          previous = request.messages;
        }
      }
    }
  });

  it("puts the run's calls, with the ids the model streamed, and its answers into the history", () => {
    const session = only(generateAgentSessions({ ...OPTIONS, sessions: 1, toolRounds: 2 }));
    const call = (id: string): WorkloadToolCall => ({
      id,
      type: 'function',
      function: { name: 'read_file', arguments: '{"path": "a b"}' },
    });
    const transcript = [
      { calls: [call('chatcmpl-tool-1'), call('chatcmpl-tool-2')], answer: 'real answer' },
      { calls: [call('chatcmpl-tool-3')] },
    ];
    const request = agentRequest(session, 1, 1, transcript);
    expectCallsAnswered(request.messages);
    const ids = request.messages.flatMap((m) => (m.role === 'tool' ? [m.tool_call_id] : []));
    expect(ids).toEqual(['chatcmpl-tool-1', 'chatcmpl-tool-2', 'chatcmpl-tool-3']);
    expect(request.messages.map((m) => m.role)).toEqual([
      'system',
      'user',
      'assistant',
      'tool',
      'assistant',
      'tool',
      'assistant',
      'user',
      'assistant',
      'tool',
    ]);
    expect(request.messages[6]).toEqual({ role: 'assistant', content: 'real answer' });
    // A hole (a round that brought no call) is the round's placeholder.
    const holed = agentRequest(session, 0, 2, [{ calls: [undefined, call('chatcmpl-tool-2')] }]);
    expect(holed.messages[2]?.tool_calls).toEqual([session.turns[0]?.rounds[0]?.placeholderCall]);
    expect(() => agentRequest(session, 0, 3)).toThrow(RangeError);
    expect(() => agentRequest(session, 4, 0)).toThrow(RangeError);
  });

  it('reasons first in the given share of turns: only their first request asks for thinking, with room for the reasoning', () => {
    const sessions = generateAgentSessions({
      ...OPTIONS,
      sessions: 200,
      turns: 10,
      reasoningProbability: 0.3,
      systemPromptBytes: 100,
      taskBytes: 100,
      toolResultBytes: 50,
    });
    const turns = sessions.flatMap((session) => session.turns);
    const share = turns.filter((turn) => turn.reasoning).length / turns.length;
    expect(share).toBeGreaterThan(0.26);
    expect(share).toBeLessThan(0.34);
    for (const session of sessions.slice(0, 20)) {
      for (const request of agentRequests(session)) {
        const reasons = (session.turns[request.turn]?.reasoning ?? false) && request.round === 0;
        expect(request.agent.thinking).toBe(reasons);
        expect(request.maxTokens).toBe((request.isAnswer ? 48 : 24) + (reasons ? 32 : 0));
      }
    }
    const never = generateAgentSessions({ ...OPTIONS, sessions: 20, reasoningProbability: 0 }).flatMap(agentRequests);
    expect(never.some((request) => request.agent.thinking)).toBe(false);
    const always = generateAgentSessions({ ...OPTIONS, sessions: 20, reasoningProbability: 1 }).flatMap(agentRequests);
    expect(always.filter((request) => request.agent.thinking)).toHaveLength(20 * 4);
  });

  it('draws rounds, result sizes, tools and pauses from their ranges, each value reachable', () => {
    const sessions = generateAgentSessions({
      ...OPTIONS,
      sessions: 100,
      taskBytes: 100,
      toolRounds: [1, 4],
      toolResultBytes: [300, 3000],
      toolMs: [50, 400],
      thinkMs: [1000, 3000],
    });
    const turns = sessions.flatMap((session) => session.turns);
    expect(new Set(turns.map((turn) => turn.rounds.length))).toEqual(new Set([1, 2, 3, 4]));
    const rounds = turns.flatMap((turn) => turn.rounds);
    expect(
      rounds.every(
        (round) =>
          round.result.length >= 300 && round.result.length <= 3000 && round.toolMs >= 50 && round.toolMs <= 400,
      ),
    ).toBe(true);
    expect(new Set(rounds.map((round) => round.tool))).toEqual(new Set(AGENT_TOOLS.map((tool) => tool.function.name)));
    expect(
      turns.every((turn) => (turn.turn === 0 ? turn.thinkMs === 0 : turn.thinkMs >= 1000 && turn.thinkMs <= 3000)),
    ).toBe(true);
  });

  it('times requests for a serial replay: start jitter, then think or tool time before each', () => {
    const sessions = generateAgentSessions(OPTIONS);
    const events = agentEvents(sessions);
    for (const session of sessions) {
      const own = events.filter((event) => event.session?.id === session.id);
      expect(own.map((event) => event.session?.turn)).toEqual(own.map((_, index) => index));
      expect(own[0]?.atMs).toBe(session.startMs);
      const pauses = agentRequests(session).map((request) => request.pauseMs);
      for (let index = 1; index < own.length; index++)
        expect(own[index]?.atMs).toBe((own[index - 1]?.atMs ?? 0) + (pauses[index] ?? -1));
    }
    expect(events.map((event) => event.atMs)).toEqual([...events.map((event) => event.atMs)].sort((a, b) => a - b));
  });
});
