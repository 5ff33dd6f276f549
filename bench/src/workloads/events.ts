/**
 * The one request-event type every workload produces (sessions, agent sessions, poisson, Mooncake and Azure replays)
 * and its JSONL trace format: one event per line, keys in a fixed order, so the same workload and seed
 * give a byte-identical file that anyone can replay. Pure: reading and writing files is in `read.ts`.
 */

/**
 * One chat message in the OpenAI wire shape (the client sends it as it is). An assistant message that
 * only calls tools has `content: null` and `tool_calls`; the tool's answer is a `tool` message whose
 * `tool_call_id` names the call.
 */
export interface WorkloadMessage {
  readonly role: 'system' | 'user' | 'assistant' | 'tool';
  readonly content: string | null;
  /** Tool messages: the tool's name (the legacy field; agentic tool messages use `tool_call_id`). */
  readonly name?: string;
  /** Assistant messages: the calls it made. */
  readonly tool_calls?: readonly WorkloadToolCall[];
  /** Tool messages: the call this result answers. */
  readonly tool_call_id?: string;
}

export interface WorkloadToolCall {
  readonly id: string;
  readonly type: 'function';
  /** `arguments` is JSON text, as the model streamed it. */
  readonly function: { readonly name: string; readonly arguments: string };
}

/** An OpenAI `tools` entry. */
export interface ToolDefinition {
  readonly type: 'function';
  readonly function: {
    readonly name: string;
    readonly description: string;
    readonly parameters: Readonly<Record<string, unknown>>;
  };
}

/** `tool_choice`: never call, let the model decide, call some tool, or call this one. */
export type ToolChoice =
  | 'none'
  | 'auto'
  | 'required'
  | { readonly type: 'function'; readonly function: { readonly name: string } };

/** The request fields of an agent turn (sent as `tools`, `tool_choice`, `chat_template_kwargs.enable_thinking`). */
export interface AgentFields {
  readonly tools: readonly ToolDefinition[];
  readonly toolChoice: ToolChoice;
  /** Whether the model reasons before it answers (Qwen3's switch; vllm-sim reasons for its `reasoningTokens`). */
  readonly thinking: boolean;
}

/** Where an event belongs in a closed-loop session: the runner sends it `thinkMs` after the previous turn's reply. */
export interface SessionRef {
  readonly id: string;
  /** 0-based position in the session's serial order (agentic sessions: every request, tool rounds included); turn 0 is sent at `atMs`. */
  readonly turn: number;
  /** Pause between the previous request's reply and this one (0 on turn 0). */
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
  /** Agent requests: tools, tool choice and reasoning. */
  readonly agent?: AgentFields;
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
  const ordered: Record<string, unknown> = {
    id: event.id,
    atMs: event.atMs,
    kind: event.kind,
    maxTokens: event.maxTokens,
  };
  if (event.session !== undefined)
    ordered['session'] = { id: event.session.id, turn: event.session.turn, thinkMs: event.session.thinkMs };
  if (event.kind === 'chat') {
    if (event.agent !== undefined)
      ordered['agent'] = {
        tools: event.agent.tools,
        toolChoice: event.agent.toolChoice,
        thinking: event.agent.thinking,
      };
    ordered['messages'] = event.messages.map(messageToJson);
  } else ordered['prompt'] = event.prompt;
  return JSON.stringify(ordered);
}

function messageToJson(message: WorkloadMessage): Record<string, unknown> {
  const ordered: Record<string, unknown> = { role: message.role, content: message.content };
  if (message.name !== undefined) ordered['name'] = message.name;
  if (message.tool_calls !== undefined)
    ordered['tool_calls'] = message.tool_calls.map((call) => ({
      id: call.id,
      type: call.type,
      function: { name: call.function.name, arguments: call.function.arguments },
    }));
  if (message.tool_call_id !== undefined) ordered['tool_call_id'] = message.tool_call_id;
  return ordered;
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
  if (typeof maxTokens !== 'number' || !Number.isInteger(maxTokens) || maxTokens < 1)
    fail('maxTokens must be an integer ≥ 1');
  let sessionRef: SessionRef | undefined;
  if (session !== undefined) {
    const s = session as Record<string, unknown>;
    if (
      typeof s !== 'object' ||
      s === null ||
      typeof s['id'] !== 'string' ||
      typeof s['turn'] !== 'number' ||
      typeof s['thinkMs'] !== 'number'
    )
      fail('session must be {id, turn, thinkMs}');
    sessionRef = { id: s['id'] as string, turn: s['turn'] as number, thinkMs: s['thinkMs'] as number };
  }
  const base = {
    id: id as string,
    atMs: atMs as number,
    maxTokens: maxTokens as number,
    ...(sessionRef ? { session: sessionRef } : {}),
  };
  if (kind === 'completion') {
    if (typeof value['prompt'] !== 'string') fail('prompt must be a string');
    return { ...base, kind, prompt: value['prompt'] as string };
  }
  if (kind !== 'chat') return fail(`unknown kind ${JSON.stringify(kind)}`);
  if (!Array.isArray(value['messages'])) return fail('messages must be an array');
  const messages = (value['messages'] as unknown[]).map((entry) => messageFromJson(entry) ?? fail('bad message'));
  if (value['agent'] === undefined) return { ...base, kind, messages };
  return {
    ...base,
    kind,
    agent: agentFromJson(value['agent']) ?? fail('agent must be {tools, toolChoice, thinking}'),
    messages,
  };
}

function messageFromJson(entry: unknown): WorkloadMessage | null {
  if (typeof entry !== 'object' || entry === null) return null;
  const m = entry as Record<string, unknown>;
  const { role, content, name, tool_calls: calls, tool_call_id: callId } = m;
  if (typeof role !== 'string' || !ROLES.has(role) || !(typeof content === 'string' || content === null)) return null;
  if (name !== undefined && typeof name !== 'string') return null;
  if (callId !== undefined && typeof callId !== 'string') return null;
  let toolCalls: WorkloadToolCall[] | undefined;
  if (calls !== undefined) {
    if (!Array.isArray(calls)) return null;
    toolCalls = [];
    for (const call of calls as unknown[]) {
      const c = call as { id?: unknown; type?: unknown; function?: { name?: unknown; arguments?: unknown } } | null;
      if (
        typeof c?.id !== 'string' ||
        c.type !== 'function' ||
        typeof c.function?.name !== 'string' ||
        typeof c.function.arguments !== 'string'
      )
        return null;
      toolCalls.push({
        id: c.id,
        type: 'function',
        function: { name: c.function.name, arguments: c.function.arguments },
      });
    }
  }
  return {
    role: role as WorkloadMessage['role'],
    content,
    ...(name !== undefined ? { name } : {}),
    ...(toolCalls !== undefined ? { tool_calls: toolCalls } : {}),
    ...(callId !== undefined ? { tool_call_id: callId } : {}),
  };
}

const TOOL_CHOICES = new Set(['none', 'auto', 'required']);

/** Tools are kept as written (JSON schemas are open-ended); only their envelope is checked. */
function agentFromJson(raw: unknown): AgentFields | null {
  if (typeof raw !== 'object' || raw === null) return null;
  const { tools, toolChoice, thinking } = raw as Record<string, unknown>;
  if (!Array.isArray(tools) || typeof thinking !== 'boolean') return null;
  const toolsOk = tools.every((tool: unknown) => {
    const t = tool as { type?: unknown; function?: { name?: unknown } } | null;
    return t?.type === 'function' && typeof t.function?.name === 'string';
  });
  const named = toolChoice as { type?: unknown; function?: { name?: unknown } } | null;
  const choiceOk =
    (typeof toolChoice === 'string' && TOOL_CHOICES.has(toolChoice)) ||
    (named?.type === 'function' && typeof named.function?.name === 'string');
  if (!toolsOk || !choiceOk) return null;
  return { tools: tools as ToolDefinition[], toolChoice: toolChoice as ToolChoice, thinking };
}

/** Parses a JSONL trace; blank lines are skipped. */
export function eventsFromJsonl(text: string): RequestEvent[] {
  const events: RequestEvent[] = [];
  text.split('\n').forEach((line, index) => {
    if (line.trim() !== '') events.push(eventFromJsonLine(line, index + 1));
  });
  return events;
}
