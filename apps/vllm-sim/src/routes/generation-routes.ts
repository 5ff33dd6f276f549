import type { FastifyInstance, FastifyReply } from 'fastify';
import { ChatCompletionRequest, CompletionRequest } from '@kvroute/protocols';
import type { z } from 'zod';
import { EngineError } from '../engine-errors';
import type { FaultInjector } from '../faults';
import type { EngineVersion } from '../engine/engine';
import { AgentTurnFields, PLAIN_TURN, planTurn, type AgentSettings, type TurnPlan } from '../generation/agent-turn';
import { readCacheSalt, withoutNullCacheSalt } from '../generation/cache-salt';
import {
  bootstrapDecodePlan,
  kvTransferPlanOf,
  type KvTransferPlan,
  type PdRole,
} from '../generation/kv-transfer-params';

/** How long an SGLang decode sim waits for the prefill sim's room before it prefills locally, ms. */
const BOOTSTRAP_WAIT_MS = 30_000;
import {
  prepareChatPrompts,
  prepareCompletionPrompts,
  type PreparedPrompt,
  type PromptLimits,
} from '../generation/prepare-prompts';
import type { EndpointKind } from '../generation/response-format';
import type { ModelTarget } from '../lora/lora-registry';
import { serveGeneration, withRequestedRank, type GenerationDeps } from '../generation/serve-generation';

export interface GenerationRoutesOptions {
  readonly servedModel: string;
  readonly limits: PromptLimits;
  readonly generation: GenerationDeps;
  readonly faults: FaultInjector;
  /** Tool calls and reasoning for chat turns. */
  readonly agent: AgentSettings;
  /** Prefill/decode role: which `kv_transfer_params` it acts on (kv-transfer-params.ts). */
  readonly pdRole: PdRole;
  /** A valid generation request arrived (before faults are drawn): tests count what reached the backend. */
  readonly onGenerationRequest?: () => void;
}

/** `POST /v1/chat/completions` and `POST /v1/completions`: validate, template, tokenize, run on the engine. */
export async function generationRoutes(app: FastifyInstance, options: GenerationRoutesOptions): Promise<void> {
  const engineVersion = options.generation.loop.engine.version;

  app.post('/v1/chat/completions', async (request, reply) => {
    const receivedAtMs = performance.now();
    const { body, cacheSalt } = parseSaltedBody(
      ChatCompletionRequest,
      withServedModel(request.body, options.servedModel),
      engineVersion,
    );
    const target = options.generation.models.resolve(body.model);
    const prompts = prepareChatPrompts(options.generation.codec, body, options.limits);
    const agentFields = parseBody(AgentTurnFields, body);
    const turn = planTurn(options.agent, {
      tools: body.tools,
      toolChoice: agentFields.tool_choice,
      enableThinking: agentFields.chat_template_kwargs?.enable_thinking,
      promptTokens: prompts[0]?.tokens ?? [],
    });
    await run(
      reply,
      'chat',
      body,
      { cacheSalt, target },
      prompts,
      receivedAtMs,
      turn,
      kvTransferPlanOf(request.body, options.pdRole),
    );
  });

  app.post('/v1/completions', async (request, reply) => {
    const receivedAtMs = performance.now();
    const { body, cacheSalt } = parseSaltedBody(
      CompletionRequest,
      withServedModel(request.body, options.servedModel),
      engineVersion,
    );
    const target = options.generation.models.resolve(body.model);
    const prompts = prepareCompletionPrompts(options.generation.codec, body, options.limits);
    const plan = kvTransferPlanOf(request.body, options.pdRole);
    await run(reply, 'text', body, { cacheSalt, target }, prompts, receivedAtMs, PLAIN_TURN, plan);
  });

  async function run(
    reply: FastifyReply,
    kind: EndpointKind,
    body: ChatCompletionRequest | CompletionRequest,
    { cacheSalt, target }: { cacheSalt: string | undefined; target: ModelTarget },
    prompts: PreparedPrompt[],
    receivedAtMs: number,
    turn: TurnPlan,
    plan: KvTransferPlan | null,
  ): Promise<void> {
    // An SGLang decode engine waits for the prefill engine's room before it can pull (bootstrap-rooms.ts).
    const kvTransfer = plan?.kind === 'bootstrap-decode' ? await bootstrapDecodePlan(plan, BOOTSTRAP_WAIT_MS) : plan;
    const generation = withRequestedRank(options.generation, reply.request.headers);
    options.onGenerationRequest?.();
    const action = await options.faults.beforeServing();
    reply.hijack();
    if (action === 'hang') return; // never answered; the socket closes when the client gives up
    serveGeneration(
      generation,
      {
        kind,
        model: body.model,
        prompts,
        stream: body.stream === true,
        includeUsage: body.stream_options?.include_usage === true,
        ignoreEos: body.ignore_eos === true,
        cacheSalt,
        target,
        turn,
        receivedAtMs,
        kvTransfer,
      },
      reply.raw,
    );
  }
}

export function parseBody<Schema extends z.ZodType>(schema: Schema, body: unknown): z.infer<Schema> {
  if (body === undefined || body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new EngineError('bad-request', 'The request body must be a JSON object.');
  }
  const result = schema.safeParse(body);
  if (!result.success) {
    const details = result.error.issues
      .map((issue) => `${issue.path.join('.') || 'body'}: ${issue.message}`)
      .join('; ');
    throw new EngineError('bad-request', `Invalid request: ${details}`);
  }
  return result.data;
}

/**
 * A generation body (chat or completion, also what `/sim/match` takes) and its validated `cache_salt`.
 * The salt is checked first, as vLLM does (generation/cache-salt.ts); the schema then sees the body
 * without a null salt, which vLLM takes as no salt.
 */
export function parseSaltedBody<Schema extends z.ZodType>(
  schema: Schema,
  body: unknown,
  engineVersion: EngineVersion,
): { body: z.infer<Schema>; cacheSalt: string | undefined } {
  const cacheSalt = readCacheSalt(body, engineVersion);
  return { body: parseBody(schema, withoutNullCacheSalt(body)), cacheSalt };
}

/**
 * A body without `model` (absent or null) names the served model: vLLM's protocol has `model: str | None = None` and
 * serves such a request with its (first) served model.
 */
export function withServedModel(body: unknown, servedModel: string): unknown {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return body;
  const model = (body as { model?: unknown }).model;
  return model === undefined || model === null ? { ...body, model: servedModel } : body;
}

export function checkModel(model: string, servedModel: string): void {
  if (model !== servedModel) throw new EngineError('not-found', `The model \`${model}\` does not exist.`);
}
