import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import { EngineError } from '../engine-errors';

/**
 * What an "agent" turn produces, token by token: optional reasoning first, then either text or one
 * tool call. One plan serves all three endpoints that answer turns (chat completions, Responses,
 * Anthropic Messages): each maps its own `tools`/`tool_choice`/thinking switch onto a TurnRequest
 * (`planTurn`), sizes the turn with `turnEnd`, and renders ChoiceTurn's pieces in its own wire shape.
 * vLLM's chat shapes (apps/vllm-sim/README.md, "Agent turns"):
 *
 * - reasoning parsers (`--reasoning-parser`) put the thinking text in `delta.reasoning_content`
 *   (newer vLLM also `delta.reasoning`), non-streaming in `message.reasoning_content`;
 * - tool parsers stream a call as a first delta carrying `index`, `id`, `type` and `function.name`
 *   with empty `arguments`, then deltas carrying only `function.arguments` pieces; the turn ends
 *   with `finish_reason: "tool_calls"`; non-streaming `message.content` is null and
 *   `message.tool_calls` holds the call.
 *
 * Every piece is one generated token, so reasoning and tool calls take decode steps like text does:
 * of a choice's N output tokens, the first R are reasoning; of the remaining A, the first emits the
 * tool call's header (id, name) and the others one argument piece each (A = 1 emits the header and
 * the whole arguments in the same step). The arguments are always a complete JSON object
 * `{"<key>": "<generated words>"}`: the sim's model stops after closing it.
 */

/** `tool_choice` as vLLM accepts it. */
export const ToolChoice = z.union([
  z.enum(['none', 'auto', 'required']),
  z.looseObject({ type: z.literal('function'), function: z.looseObject({ name: z.string() }) }),
]);
export type ToolChoice = z.infer<typeof ToolChoice>;

/** The fields of a chat request that shape an agent turn (all pass through the protocol schema). */
export const AgentTurnFields = z.looseObject({
  tool_choice: ToolChoice.nullish(),
  chat_template_kwargs: z.looseObject({ enable_thinking: z.boolean().optional() }).nullish(),
});

export interface ToolDefinition {
  readonly type: string;
  readonly function: { readonly name: string; readonly parameters?: unknown };
}

export interface AgentSettings {
  readonly seed: number;
  /** Chance that `tool_choice: "auto"` (or absent) calls a tool, drawn from the prompt: deterministic per request. */
  readonly toolCallProbability: number;
  /** Output tokens spent reasoning before the answer; 0 = no reasoning parser. */
  readonly reasoningTokens: number;
}

export interface ToolCallPlan {
  readonly name: string;
  /** The one property of the generated arguments object. */
  readonly argumentKey: string;
}

export interface TurnPlan {
  readonly reasoningTokens: number;
  readonly toolCall: ToolCallPlan | null;
}

export const PLAIN_TURN: TurnPlan = { reasoningTokens: 0, toolCall: null };

export interface TurnRequest {
  readonly tools?: readonly ToolDefinition[] | undefined;
  readonly toolChoice: ToolChoice | null | undefined;
  readonly enableThinking: boolean | undefined;
  readonly promptTokens: readonly number[];
}

/**
 * A Responses request's `tool_choice` (its `tools` are read as the chat tools vLLM converts them into:
 * libs/protocols `responsesChatTools`; hosted tools are never called by the sim). A function is named
 * flat: `{type: "function", name}`.
 */
export const ResponsesAgentFields = z.looseObject({
  tool_choice: z
    .union([z.enum(['none', 'auto', 'required']), z.looseObject({ type: z.string(), name: z.string().optional() })])
    .nullish(),
});

export function responsesTurnRequest(
  fields: z.infer<typeof ResponsesAgentFields>,
  chatTools: readonly ToolDefinition[] | undefined,
  promptTokens: readonly number[],
): TurnRequest {
  const choice = fields.tool_choice;
  // A named function is forced; another object (a hosted tool, `allowed_tools`) leaves the choice to the model.
  const toolChoice: ToolChoice | null | undefined =
    typeof choice === 'object' && choice !== null
      ? choice.type === 'function' && choice.name !== undefined
        ? { type: 'function', function: { name: choice.name } }
        : 'auto'
      : choice;
  return { tools: chatTools, toolChoice, enableThinking: undefined, promptTokens };
}

/** Anthropic's `tool_choice` and `thinking` (tools are read as the chat tools vLLM converts them into). */
export const MessagesAgentFields = z.looseObject({
  tool_choice: z.looseObject({ type: z.enum(['auto', 'any', 'tool', 'none']), name: z.string().optional() }).nullish(),
  thinking: z.looseObject({ type: z.string() }).nullish(),
});

/** vLLM's Anthropic conversion: `auto` → "auto", `any` → "required", `tool` → that function, `none` → "none". */
export function messagesTurnRequest(
  fields: z.infer<typeof MessagesAgentFields>,
  chatTools: readonly ToolDefinition[] | undefined,
  promptTokens: readonly number[],
): TurnRequest {
  const choice = fields.tool_choice;
  const toolChoice: ToolChoice | undefined =
    choice === null || choice === undefined
      ? undefined
      : choice.type === 'any'
        ? 'required'
        : choice.type === 'tool'
          ? { type: 'function', function: { name: choice.name ?? '' } }
          : choice.type;
  return {
    tools: chatTools,
    toolChoice,
    enableThinking: fields.thinking?.type === 'disabled' ? false : undefined,
    promptTokens,
  };
}

/**
 * How a turn of `outputTokens` tokens (EOS drawn, at most `maxTokens`) ends for the engine: a tool call
 * ends at EOS (the model stops after closing the call's JSON; the API then reports a tool-call finish),
 * so does an output cut short of max_tokens; otherwise max_tokens cut it.
 */
export function turnEnd(plan: TurnPlan, outputTokens: number, maxTokens: number): 'stop' | 'length' {
  const callsTool = plan.toolCall !== null && outputTokens > plan.reasoningTokens;
  return callsTool || outputTokens < maxTokens ? 'stop' : 'length';
}

/** Decides the turn once per request (every choice of `n` makes the same decision). 400 on an inconsistent tool_choice, as vLLM does. */
export function planTurn(settings: AgentSettings, request: TurnRequest): TurnPlan {
  const tools = request.tools ?? [];
  const choice = request.toolChoice ?? 'auto';
  if (tools.length === 0 && choice !== 'none' && choice !== 'auto') {
    throw new EngineError('bad-request', 'When using `tool_choice`, `tools` must be set.');
  }
  const reasoningTokens = request.enableThinking === false ? 0 : settings.reasoningTokens;
  if (tools.length === 0 || choice === 'none') return { reasoningTokens, toolCall: null };
  let tool: ToolDefinition | undefined;
  if (typeof choice === 'object') {
    tool = tools.find((candidate) => candidate.function.name === choice.function.name);
    if (!tool)
      throw new EngineError(
        'bad-request',
        `The tool specified in \`tool_choice\` (${choice.function.name}) does not match any of the specified \`tools\`.`,
      );
  } else if (choice === 'required') {
    tool = tools[0];
  } else if (promptFraction(settings.seed, request.promptTokens) < settings.toolCallProbability) {
    tool = tools[Math.floor(promptFraction(settings.seed + 1, request.promptTokens) * tools.length)];
  }
  if (!tool) return { reasoningTokens, toolCall: null };
  return {
    reasoningTokens,
    toolCall: { name: tool.function.name, argumentKey: argumentKeyOf(tool.function.parameters) },
  };
}

/** A number in [0, 1) from (seed, every prompt token): FNV-1a over the ids, then a murmur3 finaliser. */
export function promptFraction(seed: number, tokens: readonly number[]): number {
  let hash = (2166136261 ^ seed) >>> 0;
  for (const token of tokens) hash = Math.imul(hash ^ token, 16777619) >>> 0;
  hash ^= hash >>> 16;
  hash = Math.imul(hash, 0x85ebca6b) >>> 0;
  hash ^= hash >>> 13;
  hash = Math.imul(hash, 0xc2b2ae35) >>> 0;
  hash ^= hash >>> 16;
  return (hash >>> 0) / 4294967296;
}

/** The first required property of the tool's JSON schema, else its first property, else "query". */
function argumentKeyOf(parameters: unknown): string {
  const schema = parameters as { required?: unknown; properties?: unknown } | null | undefined;
  const required = Array.isArray(schema?.required)
    ? schema.required.find((key): key is string => typeof key === 'string')
    : undefined;
  if (required) return required;
  const properties = schema?.properties;
  const first = properties && typeof properties === 'object' ? Object.keys(properties)[0] : undefined;
  return first ?? 'query';
}

/** vLLM's tool-call ids: `chatcmpl-tool-` + 32 hex digits. */
export function toolCallId(): string {
  return `chatcmpl-tool-${randomUUID().replaceAll('-', '')}`;
}

/** What one generated token adds to a chat choice. */
export type TurnPiece =
  | { readonly kind: 'content'; readonly text: string }
  | { readonly kind: 'reasoning'; readonly text: string }
  /** The call's header: id and name, empty arguments. */
  | { readonly kind: 'tool-start'; readonly id: string; readonly name: string }
  | { readonly kind: 'tool-arguments'; readonly text: string };

/** One choice's turn: maps each output token (by index) to what it emits, and accumulates the message. */
export class ChoiceTurn {
  readonly toolCallId: string | null;
  reasoning = '';
  content = '';
  toolArguments = '';
  /** True once the tool-call header has been emitted. */
  toolCalled = false;

  constructor(
    readonly plan: TurnPlan,
    /** Output tokens this choice will generate. */
    readonly outputTokens: number,
    /** The call's id in the endpoint's form (chat `chatcmpl-tool-…`, Responses `call_…`, Anthropic `toolu_…`). */
    newCallId: () => string = toolCallId,
  ) {
    this.toolCallId = plan.toolCall ? newCallId() : null;
  }

  /** Reasoning tokens generated so far (at most the plan's). */
  reasoningCount(generated: number): number {
    return Math.min(generated, this.plan.reasoningTokens);
  }

  /** True when the turn generates answer tokens after its reasoning (a cut inside the reasoning leaves none). */
  get answers(): boolean {
    return this.outputTokens > this.plan.reasoningTokens;
  }

  /** The API finish reason for an engine finish reason. */
  finishReason(engineReason: string): string {
    return this.toolCalled && engineReason !== 'abort' ? 'tool_calls' : engineReason;
  }

  /** The pieces token `outputIndex` (whose text is `word`) emits, in order; also accumulates them. */
  pieces(outputIndex: number, word: string): TurnPiece[] {
    if (outputIndex < this.plan.reasoningTokens) {
      this.reasoning += word;
      return [{ kind: 'reasoning', text: word }];
    }
    const call = this.plan.toolCall;
    if (!call) {
      this.content += word;
      return [{ kind: 'content', text: word }];
    }
    const answerIndex = outputIndex - this.plan.reasoningTokens;
    const argumentSteps = this.outputTokens - this.plan.reasoningTokens - 1;
    const open = `{${JSON.stringify(call.argumentKey)}: "`;
    if (answerIndex === 0) {
      this.toolCalled = true;
      const start: TurnPiece = { kind: 'tool-start', id: this.toolCallId as string, name: call.name };
      if (argumentSteps > 0) return [start];
      this.toolArguments = `${open}${word.trimStart()}"}`;
      return [start, { kind: 'tool-arguments', text: this.toolArguments }];
    }
    const text = `${answerIndex === 1 ? `${open}${word.trimStart()}` : word}${answerIndex === argumentSteps ? '"}' : ''}`;
    this.toolArguments += text;
    return [{ kind: 'tool-arguments', text }];
  }

  /** The non-streaming `message` (vLLM's ChatMessage field order). */
  message(): object {
    const reasoning = this.plan.reasoningTokens > 0 ? this.reasoning : null;
    if (this.toolCalled && this.plan.toolCall) {
      return {
        role: 'assistant',
        reasoning_content: reasoning,
        content: null,
        tool_calls: [
          {
            id: this.toolCallId,
            type: 'function',
            function: { name: this.plan.toolCall.name, arguments: this.toolArguments },
          },
        ],
      };
    }
    return {
      role: 'assistant',
      reasoning_content: reasoning,
      content: this.answers ? this.content : null,
      tool_calls: [],
    };
  }
}

/** The `delta` object of a streamed piece (content pieces use the pre-serialised encoder instead). */
export function pieceDelta(piece: Exclude<TurnPiece, { kind: 'content' }>): object {
  switch (piece.kind) {
    case 'reasoning':
      return { reasoning_content: piece.text, reasoning: piece.text };
    case 'tool-start':
      return {
        tool_calls: [{ index: 0, id: piece.id, type: 'function', function: { name: piece.name, arguments: '' } }],
      };
    case 'tool-arguments':
      return { tool_calls: [{ index: 0, function: { arguments: piece.text } }] };
  }
}
