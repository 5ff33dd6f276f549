import { describe, expect, it } from 'vitest';
import { eventsToJsonl } from './events';
import type { SessionsOptions } from './sessions';
import { SEED_SESSIONS, generateSessions, sessionEvents, sessionMessages } from './sessions';

const OPTIONS: SessionsOptions = { ...SEED_SESSIONS, sessions: 6, turns: 5 };

describe('sessions', () => {
  it('is deterministic from the seed: same seed, byte-identical trace; another seed, another trace', () => {
    const a = eventsToJsonl(sessionEvents(generateSessions(OPTIONS)));
    expect(eventsToJsonl(sessionEvents(generateSessions(OPTIONS)))).toBe(a);
    expect(eventsToJsonl(sessionEvents(generateSessions({ ...OPTIONS, seed: 18 })))).not.toBe(a);
  });

  it('gives S × T turns whose requests share the L-byte system prompt byte for byte', () => {
    const events = sessionEvents(generateSessions(OPTIONS));
    expect(events).toHaveLength(30);
    const systems = new Set(events.map((event) => event.messages[0]?.content));
    expect(systems.size).toBe(1);
    const [system] = [...systems];
    expect(system).toHaveLength(6144);
    expect(system?.startsWith('system: be helpful and concise. sss')).toBe(true);
    expect(events.every((event) => event.maxTokens === 64 && event.kind === 'chat')).toBe(true);
  });

  it('grows each session: turn t+1 starts with turn t, its placeholder reply, then the new user turn', () => {
    const [session] = generateSessions({ ...OPTIONS, toolLoopProbability: 0 });
    if (session === undefined) throw new Error('no session');
    for (let turn = 1; turn < 5; turn++) {
      const before = sessionMessages(session, turn - 1);
      const after = sessionMessages(session, turn);
      expect(after.slice(0, before.length)).toEqual(before);
      expect(after[before.length]).toEqual({ role: 'assistant', content: `ack t${turn - 1}` });
      expect(after[before.length + 1]?.content).toMatch(new RegExp(`^turn ${turn}: [a-z0-9]{80}$`));
    }
  });

  it('lets the runner substitute the real replies', () => {
    const [session] = generateSessions({ ...OPTIONS, toolLoopProbability: 0, codeContextProbability: 0 });
    if (session === undefined) throw new Error('no session');
    const messages = sessionMessages(session, 2, ['real reply 0', 'real reply 1']);
    expect(messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'user', 'assistant', 'user']);
    expect(messages[2]?.content).toBe('real reply 0');
    expect(messages[4]?.content).toBe('real reply 1');
    expect(() => sessionMessages(session, 5)).toThrow(RangeError);
  });

  it('adds the code context and the tool loop with their probabilities', () => {
    const all = generateSessions({ ...OPTIONS, codeContextProbability: 1, toolLoopProbability: 1 });
    for (const session of all) {
      expect(session.prefix[1]).toEqual({ role: 'user', content: `// code context\n${'c'.repeat(1536 - 16)}` });
      for (const step of session.steps) {
        expect(step.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'tool']);
        expect(step.messages[1]?.content).toBe(`calling tool[${step.turn}]`);
        expect(step.messages[2]?.name).toBe('search');
        expect(step.messages[2]?.content).toHaveLength(64);
      }
    }
    const none = generateSessions({ ...OPTIONS, codeContextProbability: 0, toolLoopProbability: 0 });
    expect(none.every((s) => s.prefix.length === 1 && s.steps.every((step) => step.messages.length === 1))).toBe(true);
    const many = generateSessions({ ...SEED_SESSIONS, sessions: 400, turns: 10 });
    const withContext = many.filter((s) => s.prefix.length === 2).length / 400;
    const toolTurns = many.flatMap((s) => s.steps).filter((step) => step.messages.length === 3).length / 4000;
    expect(withContext).toBeGreaterThan(0.33);
    expect(withContext).toBeLessThan(0.47);
    expect(toolTurns).toBeGreaterThan(0.27);
    expect(toolTurns).toBeLessThan(0.33);
  });

  it('keeps session k the same whatever the number of sessions', () => {
    expect(generateSessions({ ...OPTIONS, sessions: 12 })[3]).toEqual(generateSessions(OPTIONS)[3]);
  });

  it('times turns: start jitter, then a think-time gap per turn, and tags them for serial replay', () => {
    const sessions = generateSessions({ ...OPTIONS, thinkMs: [100, 300] });
    const events = sessionEvents(sessions);
    for (const session of sessions) {
      expect(session.startMs).toBeGreaterThanOrEqual(0);
      expect(session.startMs).toBeLessThan(200);
      const turns = events.filter((event) => event.session?.id === session.id);
      expect(turns.map((event) => event.session?.turn)).toEqual([0, 1, 2, 3, 4]);
      expect(turns[0]?.atMs).toBe(session.startMs);
      for (let t = 1; t < turns.length; t++) {
        const think = turns[t]?.session?.thinkMs ?? -1;
        expect(think).toBeGreaterThanOrEqual(100);
        expect(think).toBeLessThanOrEqual(300);
        expect(turns[t]?.atMs).toBe((turns[t - 1]?.atMs ?? 0) + think);
      }
    }
    expect(events.map((event) => event.atMs)).toEqual([...events.map((event) => event.atMs)].sort((a, b) => a - b));
  });

  it('words filler: shared system prompt of exactly L bytes, code contexts of their own, max_tokens-long placeholders', () => {
    const sessions = generateSessions({
      ...OPTIONS,
      filler: 'words',
      placeholderReply: 'max-tokens',
      codeContextProbability: 1,
      systemPromptBytes: 1000,
      codeContextBytes: 500,
    });
    const system = sessions[0]?.prefix[0]?.content ?? '';
    expect(system).toHaveLength(1000);
    expect(system).not.toMatch(/s{10}/);
    expect(sessions.every((s) => s.prefix[0]?.content === system && s.prefix[1]?.content?.length === 500)).toBe(true);
    expect(new Set(sessions.map((s) => s.prefix[1]?.content)).size).toBe(sessions.length);
    const reply = sessions[0]?.steps[0]?.placeholderReply ?? '';
    expect(reply.split(' ')).toHaveLength(64);
  });
});
