/**
 * The one request-event type every workload produces (sessions, poisson, Mooncake and Azure replays)
 * and its JSONL trace format: one event per line, keys in a fixed order, so the same workload and seed
 * give a byte-identical file that anyone can replay. Pure: reading and writing files is in `read.ts`.
 */

export interface WorkloadMessage {
  readonly role: 'system' | 'user' | 'assistant' | 'tool';
  readonly content: string;
  /** Tool messages: the tool's name. */
  readonly name?: string;
}

/** Where an event belongs in a closed-loop session: the runner sends it `thinkMs` after the previous turn's reply. */
export interface SessionRef {
  readonly id: string;
  /** 0-based; turn 0 is sent at `atMs`. */
  readonly turn: number;
  /** Pause between the previous turn's reply and this turn (0 on turn 0). */
  readonly thinkMs: number;
}

interface EventBase {
  /** Unique within the workload. */
  readonly id: string;
  /** Arrival offset from the start of the run, wall-clock ms (for session turns > 0: the estimate with zero service time). */
  readonly atMs: number;
  readonly maxTokens: number;
  readonly session?: SessionRef;
}

/** A `/v1/chat/completions` request. */
export interface ChatEvent extends EventBase {
  readonly kind: 'chat';
  readonly messages: readonly WorkloadMessage[];
}

/** A `/v1/completions` request (trace replays: no chat template in the way of shared prefixes). */
export interface CompletionEvent extends EventBase {
  readonly kind: 'completion';
  readonly prompt: string;
}

export type RequestEvent = ChatEvent | CompletionEvent;

/** Events sorted by arrival (stable: equal arrivals keep their order). */
export function byArrival(events: readonly RequestEvent[]): RequestEvent[] {
  return events
    .map((event, index) => ({ event, index }))
    .sort((a, b) => a.event.atMs - b.event.atMs || a.index - b.index)
    .map(({ event }) => event);
}

/** One JSON line per event, keys in a fixed order; optional keys only when set. */
export function eventToJsonLine(event: RequestEvent): string {
  const ordered: Record<string, unknown> = { id: event.id, atMs: event.atMs, kind: event.kind, maxTokens: event.maxTokens };
  if (event.session !== undefined) ordered['session'] = { id: event.session.id, turn: event.session.turn, thinkMs: event.session.thinkMs };
  if (event.kind === 'chat') ordered['messages'] = event.messages.map((m) => (m.name === undefined ? { role: m.role, content: m.content } : { role: m.role, content: m.content, name: m.name }));
  else ordered['prompt'] = event.prompt;
  return JSON.stringify(ordered);
}

export function eventsToJsonl(events: readonly RequestEvent[]): string {
  return events.map((event) => `${eventToJsonLine(event)}\n`).join('');
}

const ROLES = new Set(['system', 'user', 'assistant', 'tool']);

/** Parses one trace line; throws with the line number on anything malformed. */
export function eventFromJsonLine(line: string, lineNumber = 1): RequestEvent {
  const fail = (why: string): never => {
    throw new Error(`trace line ${lineNumber}: ${why}`);
  };
  let raw: unknown;
  try {
    raw = JSON.parse(line);
  } catch {
    return fail('not JSON');
  }
  if (typeof raw !== 'object' || raw === null) return fail('not an object');
  const value = raw as Record<string, unknown>;
  const { id, atMs, kind, maxTokens, session } = value;
  if (typeof id !== 'string') fail('id must be a string');
  if (typeof atMs !== 'number' || !Number.isFinite(atMs) || atMs < 0) fail('atMs must be a number ≥ 0');
  if (typeof maxTokens !== 'number' || !Number.isInteger(maxTokens) || maxTokens < 1) fail('maxTokens must be an integer ≥ 1');
  let sessionRef: SessionRef | undefined;
  if (session !== undefined) {
    const s = session as Record<string, unknown>;
    if (typeof s !== 'object' || s === null || typeof s['id'] !== 'string' || typeof s['turn'] !== 'number' || typeof s['thinkMs'] !== 'number') fail('session must be {id, turn, thinkMs}');
    sessionRef = { id: s['id'] as string, turn: s['turn'] as number, thinkMs: s['thinkMs'] as number };
  }
  const base = { id: id as string, atMs: atMs as number, maxTokens: maxTokens as number, ...(sessionRef ? { session: sessionRef } : {}) };
  if (kind === 'completion') {
    if (typeof value['prompt'] !== 'string') fail('prompt must be a string');
    return { ...base, kind, prompt: value['prompt'] as string };
  }
  if (kind !== 'chat') return fail(`unknown kind ${JSON.stringify(kind)}`);
  if (!Array.isArray(value['messages'])) return fail('messages must be an array');
  const messages = (value['messages'] as unknown[]).map((entry): WorkloadMessage => {
    const m = entry as Record<string, unknown>;
    if (typeof m !== 'object' || m === null || typeof m['role'] !== 'string' || !ROLES.has(m['role']) || typeof m['content'] !== 'string') fail('bad message');
    const role = m['role'] as WorkloadMessage['role'];
    return typeof m['name'] === 'string' ? { role, content: m['content'] as string, name: m['name'] } : { role, content: m['content'] as string };
  });
  return { ...base, kind, messages };
}

/** Parses a JSONL trace; blank lines are skipped. */
export function eventsFromJsonl(text: string): RequestEvent[] {
  const events: RequestEvent[] = [];
  text.split('\n').forEach((line, index) => {
    if (line.trim() !== '') events.push(eventFromJsonLine(line, index + 1));
  });
  return events;
}
