import type { FastifyInstance, FastifyRequest } from 'fastify';
import {
  ChatCompletionRequest,
  checkGenerationLimits,
  CompletionRequest,
  measureJsonNesting,
  messagesAsChat,
  MessagesRequest,
  type GenerationLimits,
  disaggregationFieldsIn,
} from '@kvroute/protocols';
import { buildMessagesRoutingRequest, buildRoutingRequest, type RoutingRequest } from '@kvroute/routing';
import { tokenRoutingRequest, type TokenRoutingDeps } from '../routing/token-routing';
import { RouterError } from '../errors';
import { validateBody } from '../http/validate-body';
import type { CacheSalter } from '../tenants/cache-salt';
import { parseResponsesBody, type ResponsesFacts } from './parse-responses';
import { isPoolingPath } from './passthrough-paths';
import { modelOfForm, resolveModel } from './request-model';

declare module 'fastify' {
  interface FastifyRequest {
    /** The request body exactly as received: forwarded unchanged to the backend. */
    rawBody?: Buffer;
  }
  interface FastifyContextConfig {
    /**
     * The route takes no body (a stored response's GET, DELETE and cancel): an empty one sent with a
     * content type (`curl -X POST -H 'content-type: application/json'`) is no body, not a 400.
     */
    emptyBodyAllowed?: boolean;
  }
}

/**
 * Stage 2 of the request path, **parse**: the body, bounded before anything costly looks at it.
 *
 * 1. The body parser (every content type is read as JSON, as engines do, but `multipart/form-data`, kept
 *    as bytes for vLLM's audio endpoints: its `model` is read from the form) keeps the raw bytes, which are
 *    what gets forwarded: a proxy must not re-serialise a body, engines accept fields we do not know.
 *    Before `JSON.parse` one pass over the bytes refuses nesting deeper than `maxJsonDepth` anywhere,
 *    known field or not, so no later step (validation, routing text) recurses on hostile depth.
 * 2. Counts (messages, tools, content parts, prompt entries) are checked on the parsed object, before
 *    validation: a body of 200,000 invalid messages is refused at its count, not after 200,000 issues.
 * 3. Validation (zod) reports its first few issues, capped in bytes.
 * 4. The routing request: the routing text's block hashes (at most `maxRoutedBlocks`), session key,
 *    generation budget; for Anthropic Messages, of their chat view (libs/routing messages-routing.ts). A
 *    request without `model` takes the only served model (request-model.ts).
 * 5. The body to forward: the raw bytes, except for a stream whose client did not ask for usage
 *    (`requestStreamUsage`): that one asks the engine for it (forwardedBody), and send removes it again;
 *    and for a tenant's request (`cacheScope`): its `cache_salt` is the tenant's (tenants/cache-salt.ts),
 *    in the body forwarded and in the routing text, so the engine's cache and the router's index are
 *    partitioned by tenant. A tenant's pooling request (embeddings, score, rerank, classify, pooling) is
 *    salted the same way: its prompt fills the same cache.
 */
export interface ParseOptions {
  readonly blockSizeBytes: number;
  /** Leading blocks of the routing text routed on (the rest is not hashed): bounds the state's work per request. */
  readonly maxRoutedBlocks: number;
  readonly maxJsonDepth: number;
  readonly limits: GenerationLimits;
  /** Ask engines for usage on streams whose client did not (config `requestStreamUsage`; absent: true, its default). */
  readonly requestStreamUsage?: boolean;
  /** Salts tenants' requests (absent or null: open mode, bodies' own `cache_salt` only). */
  readonly salter?: () => CacheSalter | null;
  /** The models the backends serve now: a request without `model` takes the only one (request-model.ts). Absent: none known. */
  readonly servedModels?: () => readonly string[];
  /** Largest `multipart/form-data` body (audio uploads), bytes; absent: the JSON body limit. */
  readonly multipartBodyLimitBytes?: number;
  /** Token mode (routing/token-routing.ts): the models with a tokenizer are routed on token blocks; absent: byte mode. */
  readonly tokenRouting?: TokenRoutingDeps;
}

/** What the later stages need of a request: its model (the pool) and what the policy reads. */
export interface ParsedRequest {
  readonly model: string;
  /** `generation`: chat and text completions, routed by the policy; `passthrough`: other `POST /v1/*`. */
  readonly kind: 'generation' | 'passthrough';
  readonly routingRequest: RoutingRequest;
  /** The body sent to the backend: the raw bytes, unless usage is asked for on the client's behalf. */
  readonly body: Buffer;
  /** The body asks for a stream's usage the client did not ask for: the relay removes what that adds (proxy/usage-strip.ts). */
  readonly stripsStreamUsage: boolean;
  /** The body asks for a stream (`stream: true`): send bounds its time to the first byte, not to the whole response. */
  readonly stream: boolean;
  /** An Anthropic Messages stream: its prompt's usage may be only in `message_start`, so the relay keeps the stream's first bytes. */
  readonly usageAtStreamStart: boolean;
  /** A Responses request's own facts (`POST /v1/responses`); absent for other endpoints. */
  readonly responses?: ResponsesFacts;
  /**
   * A JSON pass-through body's size, what the limit stage charges it by (limit.ts estimatedTokensOf):
   * its bytes, and the `max_tokens` it names (0 when none: pooling and tokenizer calls generate
   * nothing). Absent for generation and for form uploads (audio: bytes of sound are not tokens).
   */
  readonly passthroughCharge?: { readonly bytes: number; readonly maxTokens: number };
  /**
   * Prefill/decode fields the client set itself (`kv_transfer_params`, `bootstrap_*`: @kvroute/protocols): they steer
   * transfers between engines, the router's to set; request-path.ts refuses them unless the key is privileged.
   */
  readonly disaggregationFields?: readonly string[];
}

/** `messages`: Anthropic Messages (`POST /v1/messages`); `responses`: OpenAI Responses (`POST /v1/responses`); both routed by prefix like chat. */
export type Endpoint = 'chat' | 'completions' | 'messages' | 'responses' | 'passthrough';

/** The parsed body of a `multipart/form-data` request: its bytes are in `rawBody`, forwarded as they came. */
export const MULTIPART_BODY: Readonly<Record<string, never>> = Object.freeze({});

/**
 * A body this large is parsed in steps, each its own turn of the event loop (decode, then
 * `JSON.parse`, then validation and the routing text), so that one 15 MB prompt holds the loop for
 * one step at a time (~25 ms each on a loaded core) rather than all of them together, and probes and
 * small requests get their turns in between. Smaller bodies take one turn: yielding costs latency.
 */
export const LARGE_BODY_BYTES = 1024 * 1024;

/** The next turn of the event loop (after pending I/O callbacks). */
function nextTurn(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * Registers the body parser (step 1). A `multipart/form-data` body (vLLM's audio endpoints) is not JSON:
 * its bytes are kept, up to `multipartBodyLimitBytes`, for the form's `model` field and forwarding.
 */
export function registerBodyParser(
  app: FastifyInstance,
  bodyLimitBytes: number,
  maxJsonDepth: number,
  multipartBodyLimitBytes = bodyLimitBytes,
): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser(
    'multipart/form-data',
    { parseAs: 'buffer', bodyLimit: multipartBodyLimitBytes },
    (request, body, done) => {
      request.rawBody = body as Buffer;
      done(null, MULTIPART_BODY);
    },
  );
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: bodyLimitBytes }, (request, body, done) => {
    const raw = body as Buffer;
    request.rawBody = raw;
    if (raw.length === 0) {
      if (request.routeOptions.config.emptyBodyAllowed === true) return done(null, undefined);
      return done(
        new RouterError('ROUTER_ERR_INVALID_JSON', 'The request body is empty; expected a JSON object.'),
        undefined,
      );
    }
    const nesting = measureJsonNesting(raw, maxJsonDepth);
    if (nesting.tooDeep) {
      return done(
        new RouterError(
          'ROUTER_ERR_INVALID_REQUEST',
          `The request body nests deeper than ${maxJsonDepth} levels (at byte ${nesting.offset}).`,
        ),
        undefined,
      );
    }
    const parse = (text: string): void => {
      try {
        done(null, JSON.parse(text));
      } catch (error) {
        done(
          new RouterError(
            'ROUTER_ERR_INVALID_JSON',
            `The request body is not valid JSON: ${(error as Error).message.slice(0, 200)}`,
          ),
          undefined,
        );
      }
    };
    if (raw.length < LARGE_BODY_BYTES) return parse(raw.toString('utf8'));
    setImmediate(() => {
      const text = raw.toString('utf8');
      setImmediate(() => parse(text));
    });
  });
}

/**
 * Steps 2–5 for one request of `endpoint`; `cacheScope`: the tenant's (or team's) cache partition, null
 * in open mode. Throws a RouterError (400) for what it refuses.
 */
export async function parseRequest(
  endpoint: Endpoint,
  request: FastifyRequest,
  options: ParseOptions,
  cacheScope: string | null = null,
): Promise<ParsedRequest> {
  if ((request.rawBody?.length ?? 0) >= LARGE_BODY_BYTES) await nextTurn();
  const body = request.body;
  const servedModels = options.servedModels ?? noModels;
  if (request.method === 'GET') return parseGet(request, servedModels, options.blockSizeBytes);
  if (body === MULTIPART_BODY) {
    if (endpoint !== 'passthrough')
      throw new RouterError('ROUTER_ERR_INVALID_REQUEST', 'This endpoint takes a JSON body, not multipart/form-data.');
    const model = modelOfForm(request, rawBodyOf(request), servedModels);
    // A form's `stream` field is not read (the body is forwarded as is): its deadline is the whole response's.
    return {
      model,
      kind: 'passthrough',
      routingRequest: passthroughRoutingRequest(model, sessionHeaderOf(request.headers), options.blockSizeBytes),
      body: rawBodyOf(request),
      stripsStreamUsage: false,
      stream: false,
      usageAtStreamStart: false,
    };
  }
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new RouterError('ROUTER_ERR_INVALID_REQUEST', 'The request body must be a JSON object.');
  }
  if (endpoint === 'messages') return parseMessages(request, body as Record<string, unknown>, options, cacheScope);
  if (endpoint === 'passthrough') {
    const model = resolveModel((body as { model?: unknown }).model, servedModels);
    // A tenant's pooling request is salted as its generation requests are (the same prefix cache).
    const salt = isPoolingPath(request.url)
      ? tenantSalt(options, cacheScope, saltOf((body as { cache_salt?: unknown }).cache_salt))
      : null;
    const forwarded =
      salt === null
        ? null
        : forwardedBody(rawBodyOf(request), body as Record<string, unknown>, { asksUsage: false, salt });
    return {
      model,
      kind: 'passthrough',
      routingRequest: passthroughRoutingRequest(model, sessionHeaderOf(request.headers), options.blockSizeBytes),
      body: forwarded ?? rawBodyOf(request),
      stripsStreamUsage: false,
      stream: (body as { stream?: unknown }).stream === true,
      usageAtStreamStart: false,
      passthroughCharge: { bytes: rawBodyOf(request).length, maxTokens: maxTokensOf(body as Record<string, unknown>) },
    };
  }
  // A Responses body without `model` takes the only served model, as chat's and completions' do (vLLM's
  // ResponsesRequest.model is optional too): validated and routed with it, forwarded as it came.
  const responses =
    endpoint === 'responses'
      ? parseResponsesBody(
          withModel(body as Record<string, unknown>, servedModels),
          options.limits,
          cacheScope !== null,
        )
      : null;
  const generation =
    responses?.routingBody ??
    validateGenerationBody(
      endpoint as 'chat' | 'completions',
      withModel(body as Record<string, unknown>, servedModels),
      options.limits,
    );
  const salt = tenantSalt(options, cacheScope, generation.cache_salt);
  const routed = salt === null ? generation : { ...generation, cache_salt: salt };
  const sessionKey = sessionHeaderOf(request.headers);
  const routingRequest =
    (options.tokenRouting === undefined ? null : await tokenRoutingRequest(options.tokenRouting, routed, sessionKey)) ??
    buildRoutingRequest(routed, {
      blockSizeBytes: options.blockSizeBytes,
      maxBlocks: options.maxRoutedBlocks,
      sessionKey,
    });
  // A Responses stream always ends with its usage (`response.completed`): nothing to ask for.
  const asksUsage =
    responses === null &&
    options.requestStreamUsage !== false &&
    generation.stream === true &&
    generation.stream_options?.include_usage !== true;
  // The engine's request id is the router's to make (request-path.ts): a chat or completion body's own
  // `request_id` is not forwarded (vLLM takes it as the engine request's id; duplicates fail or hang
  // engines before Nov 2025). A Responses body's is refused for tenants (parse-responses.ts).
  const forwarded = forwardedBody(rawBodyOf(request), body as Record<string, unknown>, {
    asksUsage,
    salt,
    dropsRequestId: responses === null,
  });
  return {
    model: generation.model,
    kind: 'generation',
    routingRequest,
    body: forwarded ?? rawBodyOf(request),
    stripsStreamUsage: asksUsage,
    // A Responses body's own `stream` (its routing body is a chat request without one).
    stream: (responses === null ? generation.stream : (body as { stream?: unknown }).stream) === true,
    usageAtStreamStart: false,
    responses: responses?.facts,
    disaggregationFields: disaggregationFieldsIn(body as Record<string, unknown>),
  };
}

/**
 * An Anthropic Messages body: the same count limits as chat (`messages`, `tools`, each message's content
 * blocks), the Messages schema, the routing text of system + tools + messages (libs/routing
 * messages-routing.ts). No stream usage is asked for: vLLM's Anthropic endpoint always streams it
 * (`message_delta` carries the usage). A tenant's salt goes in as on chat.
 */
async function parseMessages(
  request: FastifyRequest,
  body: Record<string, unknown>,
  options: ParseOptions,
  cacheScope: string | null,
): Promise<ParsedRequest> {
  const overLimit = checkGenerationLimits(body, options.limits);
  if (overLimit !== null)
    throw new RouterError('ROUTER_ERR_INVALID_REQUEST', overLimit.message, { param: overLimit.param });
  const messages = validateBody(MessagesRequest, body);
  const salt = tenantSalt(options, cacheScope, messages.cache_salt);
  const routed = salt === null ? messages : { ...messages, cache_salt: salt };
  const sessionKey = sessionHeaderOf(request.headers);
  const routingRequest =
    (options.tokenRouting === undefined
      ? null
      : await messagesTokenRoutingRequest(options.tokenRouting, routed, sessionKey)) ??
    buildMessagesRoutingRequest(routed, {
      blockSizeBytes: options.blockSizeBytes,
      maxBlocks: options.maxRoutedBlocks,
      sessionKey,
    });
  const forwarded = forwardedBody(rawBodyOf(request), body, { asksUsage: false, salt });
  return {
    model: messages.model,
    kind: 'generation',
    routingRequest,
    body: forwarded ?? rawBodyOf(request),
    stripsStreamUsage: false,
    stream: messages.stream === true,
    usageAtStreamStart: messages.stream === true,
    disaggregationFields: disaggregationFieldsIn(body),
  };
}

/** Token mode's routing request of a Messages body, through its chat view; null (byte mode, counted) when that cannot be built. */
async function messagesTokenRoutingRequest(
  deps: TokenRoutingDeps,
  body: MessagesRequest,
  sessionKey: string | null,
): Promise<RoutingRequest | null> {
  let chat: ChatCompletionRequest;
  try {
    chat = messagesChatView(body);
  } catch {
    deps.onFallback('template-failed');
    return null;
  }
  return tokenRoutingRequest(deps, chat, sessionKey);
}

/**
 * A Messages request as the chat request vLLM's Anthropic endpoint turns it into (token mode tokenizes
 * that), with its `metadata.user_id` as the chat's `user`: the affinity key byte mode takes from it.
 */
function messagesChatView(body: MessagesRequest): ChatCompletionRequest {
  const { messages, tools } = messagesAsChat(body);
  const userId = body.metadata?.user_id;
  return {
    model: body.model,
    messages,
    ...(tools === undefined ? {} : { tools }),
    ...(typeof body.cache_salt === 'string' ? { cache_salt: body.cache_salt } : {}),
    ...(typeof userId === 'string' ? { user: userId } : {}),
  } as ChatCompletionRequest;
}

/** The salt a tenant's request is routed and forwarded with (its scope's, over the body's own); null in open mode. */
function tenantSalt(
  options: ParseOptions,
  cacheScope: string | null,
  bodySalt: string | null | undefined,
): string | null {
  if (cacheScope === null) return null;
  const salter = options.salter?.() ?? null;
  return salter === null ? null : salter.saltFor(cacheScope, bodySalt ?? null);
}

/** The body with the model request-model.ts resolves when it names none (the body itself when it does): validated and routed as if sent. */
function withModel(body: Record<string, unknown>, servedModels: () => readonly string[]): Record<string, unknown> {
  if (typeof body.model === 'string' && body.model !== '') return body;
  return { ...body, model: resolveModel(body.model, servedModels) };
}

function noModels(): readonly string[] {
  return [];
}

function rawBodyOf(request: FastifyRequest): Buffer {
  return request.rawBody ?? Buffer.alloc(0);
}

/** Spliced in right after a body's opening brace when it has no `stream_options`. */
const STREAM_USAGE_MEMBER = '"stream_options":{"include_usage":true},';

/** What the forwarded body must say that the client's may not. */
export interface BodyChanges {
  /** Ask for a stream's usage (`stream_options.include_usage: true`) the client did not ask for. */
  readonly asksUsage: boolean;
  /** The tenant's `cache_salt`, in place of the client's (null: the body's own). */
  readonly salt: string | null;
  /** Leave out the body's `request_id` (chat and completions: the engine's id is the router's); absent: false. */
  readonly dropsRequestId?: boolean;
}

/**
 * The body to forward with `changes` (null: forward `raw` as it is).
 *
 * Usage: the engine's usage (`usage.prompt_tokens_details.cached_tokens`) is what the learn stage checks
 * the routing decision against; OpenAI-compatible engines send it on a stream only with
 * `stream_options.include_usage`. The salt: tenants/cache-salt.ts.
 *
 * - Neither member is in the body (most clients): the members are spliced in after the opening `{` (the
 *   body parsed as a JSON object, so its first non-blank byte is that brace, and it is not empty:
 *   validation required `model`); the client's bytes are kept as they came.
 * - Otherwise (or when `request_id` is to be left out) the body is re-serialised from the parsed one (its keys in their order), with
 *   `include_usage: true` and without `continuous_usage_stats` (which vLLM honours only together with
 *   `include_usage`: kept, it would put usage on every chunk), and the salt. A client's duplicate keys
 *   are gone with it: JSON.parse kept the last, as engines would.
 */
export function forwardedBody(raw: Buffer, parsed: Record<string, unknown>, changes: BodyChanges): Buffer | null {
  const { asksUsage, salt } = changes;
  const dropsRequestId = changes.dropsRequestId === true && Object.hasOwn(parsed, 'request_id');
  if (!asksUsage && salt === null && !dropsRequestId) return null;
  const splices =
    !dropsRequestId &&
    (!asksUsage || !Object.hasOwn(parsed, 'stream_options')) &&
    (salt === null || !Object.hasOwn(parsed, 'cache_salt'));
  if (splices) {
    const brace = raw.indexOf(0x7b);
    const members =
      (asksUsage ? STREAM_USAGE_MEMBER : '') + (salt === null ? '' : `"cache_salt":${JSON.stringify(salt)},`);
    return Buffer.concat([raw.subarray(0, brace + 1), Buffer.from(members), raw.subarray(brace + 1)]);
  }
  const changed: Record<string, unknown> = { ...parsed };
  if (asksUsage) {
    const { continuous_usage_stats: _ignored, ...options } = (parsed.stream_options ?? {}) as Record<string, unknown>;
    changed.stream_options = { ...options, include_usage: true };
  }
  if (salt !== null) changed.cache_salt = salt;
  if (dropsRequestId) delete changed.request_id;
  return Buffer.from(JSON.stringify(changed));
}

/** Counts, then the schema: the validated chat or completion body. */
function validateGenerationBody(
  endpoint: 'chat' | 'completions',
  body: unknown,
  limits: GenerationLimits,
): ChatCompletionRequest | CompletionRequest {
  const overLimit = checkGenerationLimits(body, limits);
  if (overLimit !== null)
    throw new RouterError('ROUTER_ERR_INVALID_REQUEST', overLimit.message, { param: overLimit.param });
  return endpoint === 'chat' ? validateBody(ChatCompletionRequest, body) : validateBody(CompletionRequest, body);
}

/**
 * A pass-through `GET /v1/*` (files, batches: no body, no model): its pool is the `model` its query
 * names, else the first model the caller may use (any of the caller's backends can answer a list).
 */
function parseGet(
  request: FastifyRequest,
  servedModels: () => readonly string[],
  blockSizeBytes: number,
): ParsedRequest {
  const named = (request.query as Record<string, unknown> | undefined)?.model;
  const model = typeof named === 'string' && named !== '' ? named : servedModels()[0];
  if (model === undefined)
    throw new RouterError('ROUTER_ERR_NO_BACKEND', 'No backend has reported its models yet; retry.', {
      retryAfterSeconds: 1,
    });
  return {
    model,
    kind: 'passthrough',
    routingRequest: passthroughRoutingRequest(model, sessionHeaderOf(request.headers), blockSizeBytes),
    body: Buffer.alloc(0),
    stripsStreamUsage: false,
    stream: false,
    usageAtStreamStart: false,
    passthroughCharge: { bytes: 0, maxTokens: 0 },
  };
}

/** A body's own `cache_salt` when it is a string (anything else: none, and the engine refuses it as it would). */
function saltOf(given: unknown): string | null {
  return typeof given === 'string' ? given : null;
}

/** A pass-through body's generation budget: its `max_tokens` (or `max_completion_tokens`) when a positive integer, else 0. */
function maxTokensOf(body: Record<string, unknown>): number {
  const given = body.max_tokens ?? body.max_completion_tokens;
  return typeof given === 'number' && Number.isSafeInteger(given) && given > 0 ? given : 0;
}

function passthroughRoutingRequest(model: string, sessionKey: string | null, blockSizeBytes: number): RoutingRequest {
  return { model, blockHashes: [], blockSizeBytes, textBytes: 0, contextBlocks: 0, headHash: 0, sessionKey };
}

/** The request's `X-Session-Id` (null when absent or empty): its affinity key, before the body's `user` (buildRoutingRequest decides). */
function sessionHeaderOf(headers: FastifyRequest['headers']): string | null {
  const header = headers['x-session-id'];
  return typeof header === 'string' && header !== '' ? header : null;
}
