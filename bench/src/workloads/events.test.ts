import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import type { RequestEvent } from './events';
import { byArrival, eventFromJsonLine, eventsFromJsonl, eventsToJsonl } from './events';
import { generatePoisson } from './poisson';
import { readMooncakeFile, readTraceFile, writeTraceFile } from './read';
import { SEED_SESSIONS, generateSessions, sessionEvents } from './sessions';
import { AGENTIC_DEFAULTS, agentEvents, generateAgentSessions } from './agentic';
import { parseAzure } from './traces';

const sessions = sessionEvents(
  generateSessions({ ...SEED_SESSIONS, sessions: 3, turns: 4, toolLoopProbability: 0.5, codeContextProbability: 0.5 }),
);
const poisson = generatePoisson({
  seed: 1,
  ratePerS: 5,
  count: 20,
  poolSize: 2,
  reuseRatio: 0.5,
  prefixTokens: { kind: 'fixed', value: 64 },
  promptTokens: { kind: 'fixed', value: 100 },
  outputTokens: { kind: 'uniform', min: 1, max: 50 },
}).events;
const agentic = agentEvents(
  generateAgentSessions({
    ...AGENTIC_DEFAULTS,
    seed: 1,
    sessions: 2,
    turns: 2,
    systemPromptBytes: 300,
    taskBytes: 200,
    toolResultBytes: 100,
  }),
);
const azure = parseAzure(
  'TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,10,4\n2023-11-16 18:15:47.0000001,12,0\n',
);

describe('JSONL trace', () => {
  it('round-trips every kind of workload exactly, and re-serialises byte for byte', () => {
    for (const events of [sessions, agentic, poisson, azure] as RequestEvent[][]) {
      const text = eventsToJsonl(events);
      expect(text.split('\n')).toHaveLength(events.length + 1);
      const back = eventsFromJsonl(text);
      expect(back).toEqual(events);
      expect(eventsToJsonl(back)).toBe(text);
    }
    expect(sessions.some((event) => event.messages.some((m) => m.role === 'tool' && m.name === 'search'))).toBe(true);
  });

  it('writes keys in a fixed order, one event per line', () => {
    const line = eventsToJsonl([{ kind: 'completion', prompt: 'hi', maxTokens: 3, atMs: 1.5, id: 'x' }]);
    expect(line).toBe('{"id":"x","atMs":1.5,"kind":"completion","maxTokens":3,"prompt":"hi"}\n');
  });

  it('rejects malformed lines with their line number', () => {
    expect(() => eventsFromJsonl('\n{"id":"x","atMs":0,"kind":"chat","maxTokens":1}')).toThrow(
      /trace line 2: messages/,
    );
    expect(() => eventFromJsonLine('nope', 7)).toThrow(/trace line 7: not JSON/);
    expect(() => eventFromJsonLine('{"id":"x","atMs":-1,"kind":"completion","maxTokens":1,"prompt":""}')).toThrow(
      /atMs/,
    );
    expect(() => eventFromJsonLine('{"id":"x","atMs":0,"kind":"audio","maxTokens":1}')).toThrow(/unknown kind/);
    expect(() =>
      eventFromJsonLine('{"id":"x","atMs":0,"kind":"chat","maxTokens":1,"messages":[{"role":"robot","content":""}]}'),
    ).toThrow(/bad message/);
    const chat = (extra: string) => `{"id":"x","atMs":0,"kind":"chat","maxTokens":1,${extra}}`;
    expect(() =>
      eventFromJsonLine(
        chat(
          '"messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f"}}]}]',
        ),
      ),
    ).toThrow(/bad message/);
    expect(() => eventFromJsonLine(chat('"messages":[{"role":"tool","content":"r","tool_call_id":7}]'))).toThrow(
      /bad message/,
    );
    expect(() =>
      eventFromJsonLine(chat('"agent":{"tools":[],"toolChoice":"sometimes","thinking":false},"messages":[]')),
    ).toThrow(/agent must be/);
    expect(
      eventFromJsonLine(
        chat(
          '"agent":{"tools":[],"toolChoice":{"type":"function","function":{"name":"f"}},"thinking":true},"messages":[]',
        ),
      ),
    ).toMatchObject({ agent: { toolChoice: { function: { name: 'f' } }, thinking: true } });
  });

  it('sorts by arrival, stably', () => {
    const events = [azure[1], azure[0], { ...azure[0], id: 'same-time' }] as RequestEvent[];
    expect(byArrival(events).map((event) => event.id)).toEqual(['a2', 'same-time', 'a3']);
  });

  it('writes and reads trace files, and reads the Mooncake file through the reader', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'kvroute-trace-'));
    try {
      const path = join(dir, 'sessions.jsonl');
      await writeTraceFile(path, sessions);
      expect(await readFile(path, 'utf8')).toBe(eventsToJsonl(sessions));
      expect(await readTraceFile(path)).toEqual(sessions);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    const mooncake = await readMooncakeFile(
      fileURLToPath(new URL('../../../test-data/mooncake/synthetic_trace.head.jsonl', import.meta.url)),
      { limit: 3 },
    );
    expect(mooncake.map((event) => event.atMs)).toEqual([0, 0, 40]);
  });
});
