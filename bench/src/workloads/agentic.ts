/**
 * Agent sessions: S concurrent conversations whose turns are tool-call loops. Pure and deterministic from
 * the seed; sessions are independent streams (session k is the same whatever S is).
 *
 * Every request carries the whole history, streams, and offers the same tools (`AGENT_TOOLS`, rendered into
 * the system prompt by the engine's chat template, so they are part of the shared prefix). A turn is:
 *
 *   user message (the session's task on turn 0, a follow-up later)
 *   → K tool rounds (K uniform in `toolRounds`): a request with `tool_choice` naming the round's tool; the
 *     model streams one call; the client appends the assistant message with that call (`content: null`,
 *     `tool_calls` with the streamed id, name and arguments), waits `toolMs` (the tool runs), appends the
 *     `tool` message with the round's result (`tool_call_id` = the call's id), and sends the next request
 *   → the answer: `tool_choice: "none"`, its text appended as the assistant message.
 *
 * A share `reasoningProbability` of turns reason first: their first request asks for thinking and gets
 * `reasoningTokens` more `max_tokens`; every other request sends `enable_thinking: false`. The reasoning
 * text is never sent back (clients drop it, as the chat templates do).
 *
 * The calls and answers are known only at run time, so `agentRequest` takes a transcript of what the
 * runner got; whatever is missing (a failed request, a trace with no run behind it) is the round's
 * placeholder, so the conversation stays well-formed.
 */
import { seededRandom } from '@kvroute/workloads';
import type { AgentFields, ChatEvent, ToolDefinition, WorkloadMessage, WorkloadToolCall } from './events';
import { byArrival } from './events';
import { mixSeed, wordBytes, wordText } from './text';

/** An inclusive integer range [min, max], or one value. */
export type IntRange = number | readonly [min: number, max: number];

export interface AgenticOptions {
  readonly sessions: number;
  /** User turns per session. */
  readonly turns: number;
  readonly seed: number;
  /** Bytes of the system prompt (word text), byte-identical in every session. */
  readonly systemPromptBytes: number;
  /** Bytes of the session's task (its first user message, after its `task N: ` head): a repository excerpt, an issue, a document. */
  readonly taskBytes: number;
  /** Bytes of each later user message (after its `turn N: ` head). */
  readonly userTurnBytes: number;
  /** K: tool rounds per turn, uniform. */
  readonly toolRounds: IntRange;
  /** Bytes of each tool result, uniform. */
  readonly toolResultBytes: IntRange;
  /** `max_tokens` of a tool round: the call's header and its argument pieces. */
  readonly toolCallTokens: number;
  /** `max_tokens` of the answer. */
  readonly answerTokens: number;
  /** Share of turns whose first request reasons. */
  readonly reasoningProbability: number;
  /** Reasoning tokens the backend produces before it answers (vllm-sim's `reasoningTokens`): added to that request's `max_tokens`. */
  readonly reasoningTokens: number;
  /** Session k starts at a uniform offset in [0, startJitterMs). */
  readonly startJitterMs: number;
  /** Pause between an answer and the session's next user message. */
  readonly thinkMs: IntRange;
  /** How long a tool runs: the pause between a call and the request that carries its result. */
  readonly toolMs: IntRange;
}

export const AGENTIC_DEFAULTS: Omit<AgenticOptions, 'seed'> = {
  sessions: 16,
  turns: 6,
  systemPromptBytes: 6144,
  taskBytes: 8192,
  userTurnBytes: 200,
  toolRounds: [1, 4],
  toolResultBytes: [300, 3000],
  toolCallTokens: 24,
  answerTokens: 48,
  reasoningProbability: 0.3,
  reasoningTokens: 32,
  startJitterMs: 8000,
  thinkMs: [1000, 3000],
  toolMs: [50, 400],
};

const stringProperty = (description: string) => ({ type: 'string', description });

/** The tools every agent request offers, in the OpenAI shape. */
export const AGENT_TOOLS: readonly ToolDefinition[] = [
  {
    type: 'function',
    function: {
      name: 'search_code',
      description: 'Search the repository for code matching a query; returns file paths with matching lines.',
      parameters: {
        type: 'object',
        properties: {
          query: stringProperty('what to look for'),
          path_glob: stringProperty('only files matching this glob'),
        },
        required: ['query'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'read_file',
      description: 'Read a file of the repository, optionally a range of lines.',
      parameters: {
        type: 'object',
        properties: {
          path: stringProperty('file path from the repository root'),
          start_line: { type: 'integer' },
          end_line: { type: 'integer' },
        },
        required: ['path'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'run_tests',
      description: 'Run the test suite, or the tests of one target, and return the failures with their output.',
      parameters: {
        type: 'object',
        properties: { target: stringProperty('test file, folder or project') },
        required: ['target'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'web_search',
      description: 'Search the web and return the top results with a short excerpt each.',
      parameters: {
        type: 'object',
        properties: { query: stringProperty('search terms'), max_results: { type: 'integer' } },
        required: ['query'],
      },
    },
  },
];

export interface AgentRound {
  /** The tool this round's request names in `tool_choice`. */
  readonly tool: string;
  /** The tool message's content. */
  readonly result: string;
  /** Pause between the call's reply and the next request. */
  readonly toolMs: number;
  /** The call this round stands for when the run has none (a trace, a failed request). */
  readonly placeholderCall: WorkloadToolCall;
}

export interface AgentTurn {
  readonly turn: number;
  /** Pause between the previous turn's answer and this turn's first request (0 on turn 0). */
  readonly thinkMs: number;
  readonly user: string;
  /** Whether this turn's first request reasons. */
  readonly reasoning: boolean;
  readonly rounds: readonly AgentRound[];
  /** The answer this turn stands for when the run has none. */
  readonly placeholderAnswer: string;
}

export interface AgentSession {
  readonly id: string;
  readonly startMs: number;
  readonly system: string;
  readonly tools: readonly ToolDefinition[];
  readonly toolCallTokens: number;
  readonly answerTokens: number;
  readonly reasoningTokens: number;
  readonly turns: readonly AgentTurn[];
}

/** What the runner got so far, per turn: the call of each round (holes: none usable) and the answer. */
export interface AgentTurnTranscript {
  readonly calls: ReadonlyArray<WorkloadToolCall | undefined>;
  readonly answer?: string | undefined;
}

/** One request of a session. */
export interface AgentRequest {
  /** `<session>-t<turn>-c<round>` for a tool round, `<session>-t<turn>-a` for the answer. */
  readonly id: string;
  readonly turn: number;
  /** 0 … K − 1: tool rounds; K: the answer. */
  readonly round: number;
  readonly isAnswer: boolean;
  /** Pause before sending it: the user's think time, the previous tool's run time, or 0. */
  readonly pauseMs: number;
  readonly messages: WorkloadMessage[];
  readonly agent: AgentFields;
  readonly maxTokens: number;
}

export function generateAgentSessions(options: AgenticOptions): AgentSession[] {
  const head = 'system: you are a coding agent. use the tools to inspect the repository before you answer. ';
  const system = (
    head + wordBytes(Math.max(0, options.systemPromptBytes - head.length), mixSeed(options.seed, 20))
  ).slice(0, options.systemPromptBytes);
  return Array.from({ length: options.sessions }, (_, index) => generateAgentSession(options, index, system));
}

function generateAgentSession(options: AgenticOptions, index: number, system: string): AgentSession {
  const random = seededRandom(mixSeed(options.seed, 21, index));
  const startMs = Math.floor(random() * options.startJitterMs);
  const turns: AgentTurn[] = [];
  for (let turn = 0; turn < options.turns; turn++) {
    const thinkMs = turn === 0 ? 0 : drawInt(options.thinkMs, random);
    const reasoning = random() < options.reasoningProbability;
    const head = turn === 0 ? `task ${index}: ` : `turn ${turn}: `;
    const bytes = turn === 0 ? options.taskBytes : options.userTurnBytes;
    const user = head + wordBytes(bytes, mixSeed(options.seed, 22, index, turn));
    const roundCount = drawInt(options.toolRounds, random);
    const rounds: AgentRound[] = [];
    for (let round = 0; round < roundCount; round++) {
      const tool = AGENT_TOOLS[Math.floor(random() * AGENT_TOOLS.length)] as ToolDefinition;
      const resultHead = `${tool.function.name} result ${turn}.${round}:`;
      const resultBytes = Math.max(resultHead.length, drawInt(options.toolResultBytes, random));
      const result =
        resultHead + wordBytes(resultBytes - resultHead.length, mixSeed(options.seed, 23, index, turn, round));
      const words = wordText(
        Math.max(1, options.toolCallTokens - 1),
        mixSeed(options.seed, 24, index, turn, round),
      ).trimStart();
      const placeholderCall: WorkloadToolCall = {
        id: `call-s${index}-t${turn}-c${round}`,
        type: 'function',
        function: { name: tool.function.name, arguments: JSON.stringify({ [firstRequired(tool)]: words }) },
      };
      rounds.push({ tool: tool.function.name, result, toolMs: drawInt(options.toolMs, random), placeholderCall });
    }
    const placeholderAnswer = wordText(options.answerTokens, mixSeed(options.seed, 25, index, turn)).trimStart();
    turns.push({ turn, thinkMs, user, reasoning, rounds, placeholderAnswer });
  }
  return {
    id: `s${index}`,
    startMs,
    system,
    tools: AGENT_TOOLS,
    toolCallTokens: options.toolCallTokens,
    answerTokens: options.answerTokens,
    reasoningTokens: options.reasoningTokens,
    turns,
  };
}

/** The property the engine fills (the tool's first required parameter, as vllm-sim does): the placeholder call's key. */
function firstRequired(tool: ToolDefinition): string {
  const required = tool.function.parameters['required'];
  return Array.isArray(required) && typeof required[0] === 'string' ? required[0] : 'query';
}

function drawInt(range: IntRange, random: () => number): number {
  if (typeof range === 'number') return range;
  const [min, max] = range;
  return min + Math.floor(random() * (max - min + 1));
}

/** Requests in one session: per turn, its rounds and the answer. */
export function agentRequestCount(session: AgentSession): number {
  return session.turns.reduce((sum, turn) => sum + turn.rounds.length + 1, 0);
}

function turnOf(session: AgentSession, turn: number): AgentTurn {
  const spec = session.turns[turn];
  if (spec === undefined) throw new RangeError(`session ${session.id} has no turn ${turn}`);
  return spec;
}

/** A round's two messages: the assistant's call, then the tool's result for that call. */
function roundMessages(call: WorkloadToolCall, round: AgentRound): WorkloadMessage[] {
  return [
    { role: 'assistant', content: null, tool_calls: [call] },
    { role: 'tool', tool_call_id: call.id, content: round.result },
  ];
}

/**
 * Request `round` of turn `turn` (round = K: the answer), with the whole history: the system prompt,
 * every earlier turn (user message, its rounds, its answer), this turn's user message and its rounds
 * before `round`. Calls and answers come from `transcript` where it has them, else placeholders.
 */
export function agentRequest(
  session: AgentSession,
  turn: number,
  round: number,
  transcript: readonly AgentTurnTranscript[] = [],
): AgentRequest {
  const spec = turnOf(session, turn);
  if (round < 0 || round > spec.rounds.length)
    throw new RangeError(`session ${session.id} turn ${turn} has no request ${round}`);
  const messages: WorkloadMessage[] = [{ role: 'system', content: session.system }];
  for (let earlier = 0; earlier <= turn; earlier++) {
    const past = turnOf(session, earlier);
    messages.push({ role: 'user', content: past.user });
    const until = earlier === turn ? round : past.rounds.length;
    for (let r = 0; r < until; r++) {
      const spec = past.rounds[r] as AgentRound;
      messages.push(...roundMessages(transcript[earlier]?.calls[r] ?? spec.placeholderCall, spec));
    }
    if (earlier < turn)
      messages.push({ role: 'assistant', content: transcript[earlier]?.answer ?? past.placeholderAnswer });
  }
  const isAnswer = round === spec.rounds.length;
  const thinking = spec.reasoning && round === 0;
  const pauseMs = round === 0 ? spec.thinkMs : (spec.rounds[round - 1] as AgentRound).toolMs;
  const toolChoice = isAnswer
    ? ('none' as const)
    : { type: 'function' as const, function: { name: (spec.rounds[round] as AgentRound).tool } };
  const maxTokens =
    (isAnswer ? session.answerTokens : session.toolCallTokens) + (thinking ? session.reasoningTokens : 0);
  return {
    id: `${session.id}-t${turn}-${isAnswer ? 'a' : `c${round}`}`,
    turn,
    round,
    isAnswer,
    pauseMs,
    messages,
    agent: { tools: session.tools, toolChoice, thinking },
    maxTokens,
  };
}

/** Every request of a session, in order, with placeholder calls and answers. */
export function agentRequests(session: AgentSession): AgentRequest[] {
  return session.turns.flatMap((turn) =>
    Array.from({ length: turn.rounds.length + 1 }, (_, round) => agentRequest(session, turn.turn, round)),
  );
}

/**
 * Every request as a chat event with placeholder calls and answers, by arrival (`atMs` assumes zero
 * service time: start + pauses); `session.turn` is the request's position in its session, so a replay
 * keeps them serial.
 */
export function agentEvents(sessions: readonly AgentSession[]): ChatEvent[] {
  const events: ChatEvent[] = [];
  for (const session of sessions) {
    let atMs = session.startMs;
    agentRequests(session).forEach((request, position) => {
      atMs += request.pauseMs;
      events.push({
        id: request.id,
        atMs,
        kind: 'chat',
        maxTokens: request.maxTokens,
        session: { id: session.id, turn: position, thinkMs: request.pauseMs },
        agent: request.agent,
        messages: request.messages,
      });
    });
  }
  return byArrival(events) as ChatEvent[];
}
