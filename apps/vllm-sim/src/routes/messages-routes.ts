import type { FastifyInstance } from 'fastify';
import { checkGenerationLimits, MessagesRequest, DEFAULT_GENERATION_LIMITS, messagesAsChat } from '@kvroute/protocols';
import { EngineError } from '../engine-errors';
import type { FaultInjector } from '../faults';
import { MessagesAgentFields, messagesTurnRequest, planTurn, type AgentSettings } from '../generation/agent-turn';
import { prepareMessagesPrompt, type PromptLimits } from '../generation/prepare-prompts';
import { withRequestedRank, type GenerationDeps } from '../generation/serve-generation';
import { serveMessages } from '../generation/serve-messages';
import { parseBody } from './generation-routes';

export interface MessagesRoutesOptions {
  readonly servedModel: string;
  readonly limits: PromptLimits;
  readonly generation: GenerationDeps;
  readonly faults: FaultInjector;
  /** Tool calls and reasoning, as for chat turns. */
  readonly agent: AgentSettings;
}

/**
 * `POST /v1/messages` (Anthropic Messages, as vLLM serves it): the body becomes the chat prompt vLLM
 * would template (@kvroute/protocols messages-as-chat.ts), so its prefix cache behaves as chat's; streamed or
 * not (generation/serve-messages.ts). `cache_salt` is not read: vLLM's Anthropic request has no such
 * field (pydantic drops it). Faults apply as on chat.
 */
export async function messagesRoutes(app: FastifyInstance, options: MessagesRoutesOptions): Promise<void> {
  app.post('/v1/messages', async (request, reply) => {
    const receivedAtMs = performance.now();
    const overLimit = checkGenerationLimits(request.body, DEFAULT_GENERATION_LIMITS);
    if (overLimit !== null) throw new EngineError('bad-request', overLimit.message);
    const body = parseBody(MessagesRequest, request.body);
    const target = options.generation.models.resolve(body.model);
    const { messages, tools } = messagesAsChat(body);
    // vLLM's Anthropic endpoint renders the chat request it converts the body into, with chat's defaults.
    const tokens = options.generation.codec.chatPromptTokens({ messages, tools });
    const prompt = prepareMessagesPrompt(tokens, body.max_tokens, options.limits);
    const turn = planTurn(
      options.agent,
      messagesTurnRequest(parseBody(MessagesAgentFields, body), tools, prompt.tokens),
    );
    const generation = withRequestedRank(options.generation, request.headers);
    const action = await options.faults.beforeServing();
    reply.hijack();
    if (action === 'hang') return;
    serveMessages(
      generation,
      { model: body.model, prompt, stream: body.stream === true, cacheSalt: undefined, target, turn, receivedAtMs },
      reply.raw,
    );
  });
}
