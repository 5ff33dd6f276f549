import type { FastifyInstance, FastifyReply } from 'fastify';
import {
  responsesChatMessages,
  responsesChatTools,
  ResponsesRequest,
  RESPONSE_ID_PATTERN,
  type ChatMessage,
} from '@kvroute/protocols';
import type { FaultInjector } from '../faults';
import { planTurn, ResponsesAgentFields, responsesTurnRequest, type AgentSettings } from '../generation/agent-turn';
import { prepareChatPrompts, type PromptLimits } from '../generation/prepare-prompts';
import { withRequestedRank, type GenerationDeps } from '../generation/serve-generation';
import type { ResponseStore } from '../responses/response-store';
import { newResponseId, serveResponse } from '../responses/serve-response';
import { parseBody, parseSaltedBody, withServedModel } from './generation-routes';

export interface ResponsesRoutesOptions {
  readonly servedModel: string;
  readonly limits: PromptLimits;
  readonly generation: GenerationDeps;
  readonly faults: FaultInjector;
  readonly store: ResponseStore;
  /** Tool calls and reasoning, as for chat turns. */
  readonly agent: AgentSettings;
}

/**
 * The Responses API as vLLM serves it (`vllm/entrypoints/openai/serving_responses.py`; see README):
 * `POST /v1/responses` (stored unless `store: false`; streamed or not), `GET /v1/responses/{id}` and
 * `DELETE /v1/responses/{id}`. The prompt is the chat template over: `instructions` (system), the
 * previous response's conversation (its inputs and answers, without its instructions), this turn's
 * `input`, and `tools`; so a chain of turns on one sim hits its prefix cache turn after turn, and a turn
 * sent to another sim (which does not know the previous id) gets vLLM's 404.
 */
export async function responsesRoutes(app: FastifyInstance, options: ResponsesRoutesOptions): Promise<void> {
  const engineVersion = options.generation.loop.engine.version;

  app.post('/v1/responses', async (request, reply) => {
    // `model` is optional, as in vLLM's ResponsesRequest: absent, the served model answers (as on chat).
    const { body, cacheSalt } = parseSaltedBody(
      ResponsesRequest,
      withServedModel(request.body, options.servedModel),
      engineVersion,
    );
    const target = options.generation.models.resolve(body.model);
    const previousId = body.previous_response_id ?? null;
    const previous = previousId === null ? undefined : options.store.get(previousId);
    if (previousId !== null && previous === undefined) return notFound(reply, previousId, 'previous_response_id');
    const turn = responsesChatMessages(null, body.input);
    const historyBefore: ChatMessage[] = [...(previous?.history ?? []), ...turn];
    const instructions = typeof body.instructions === 'string' && body.instructions !== '' ? body.instructions : null;
    const messages: ChatMessage[] =
      instructions === null ? historyBefore : [{ role: 'system', content: instructions }, ...historyBefore];
    // vLLM renders the function tools in their chat form (responsesChatTools); hosted tools not at all.
    const chatTools = responsesChatTools(body.tools);
    const [prompt] = prepareChatPrompts(
      options.generation.codec,
      {
        model: body.model,
        messages,
        ...(chatTools === undefined ? {} : { tools: chatTools }),
        ...(body.max_output_tokens == null ? {} : { max_completion_tokens: body.max_output_tokens }),
      },
      options.limits,
    );
    const turnPlan = planTurn(
      options.agent,
      responsesTurnRequest(parseBody(ResponsesAgentFields, body), chatTools, prompt?.tokens ?? []),
    );
    const generation = withRequestedRank(options.generation, request.headers);
    const action = await options.faults.beforeServing();
    reply.hijack();
    if (action === 'hang') return;
    serveResponse(
      generation,
      {
        frame: {
          id: newResponseId(),
          createdAt: Math.floor(Date.now() / 1000),
          model: body.model,
          instructions,
          previousResponseId: previousId,
          tools: body.tools ?? [],
          toolChoice: (body as { tool_choice?: unknown }).tool_choice ?? 'auto',
          // vLLM: `store` is honoured only with its store enabled (here: maxStoredResponses > 0).
          store: body.store !== false && options.store.enabled,
          maxOutputTokens: body.max_output_tokens ?? null,
          metadata: (body as { metadata?: unknown }).metadata ?? null,
          user: body.user ?? null,
        },
        prompt: prompt as NonNullable<typeof prompt>,
        stream: body.stream === true,
        cacheSalt,
        target,
        ignoreEos: (body as { ignore_eos?: unknown }).ignore_eos === true,
        turn: turnPlan,
        historyBefore,
        store: options.store,
      },
      reply.raw,
    );
  });

  app.get('/v1/responses/:id', async (request, reply) => {
    const id = (request.params as { id: string }).id;
    const stored = RESPONSE_ID_PATTERN.test(id) ? options.store.get(id) : undefined;
    if (stored === undefined) return notFound(reply, id, 'response_id');
    return stored.response;
  });

  app.delete('/v1/responses/:id', async (request, reply) => {
    const id = (request.params as { id: string }).id;
    if (!RESPONSE_ID_PATTERN.test(id) || !options.store.delete(id)) return notFound(reply, id, 'response_id');
    // OpenAI's answer to a delete (vLLM has no DELETE route yet: this is the API's shape).
    return { id, object: 'response.deleted', deleted: true };
  });
}

/** vLLM's answer for an id it does not hold (`_make_not_found_error`): 404, `invalid_request_error`. */
function notFound(reply: FastifyReply, id: string, param: string): FastifyReply {
  return reply.code(404).send({
    error: {
      message: `Response with id '${id.slice(0, 128)}' not found.`,
      type: 'invalid_request_error',
      param,
      code: 404,
    },
  });
}
