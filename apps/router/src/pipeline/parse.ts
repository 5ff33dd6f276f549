import type { FastifyInstance, FastifyRequest } from 'fastify';
import {
  ChatCompletionRequest,
  checkGenerationLimits,
  CompletionRequest,
  measureJsonNesting,
  MessagesRequest,
  type GenerationLimits,
} from '@kvroute/protocols';
import { buildMessagesRoutingRequest, buildRoutingRequest, type RoutingRequest } from '@kvroute/routing';
import { RouterError } from '../errors';
import { validateBody } from '../http/validate-body';
import type { CacheSalter } from '../tenants/cache-salt';
import { parseResponsesBody, type ResponsesFacts } from './parse-responses';
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
 *    partitioned by tenant.
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
    return {
      model,
      kind: 'passthrough',
      routingRequest: passthroughRoutingRequest(model, sessionHeaderOf(request.headers), options.blockSizeBytes),
      body: rawBodyOf(request),
      stripsStreamUsage: false,
      stream: (body as { stream?: unknown }).stream === true,
      usageAtStreamStart: false,
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
  const routingRequest = buildRoutingRequest(salt === null ? generation : { ...generation, cache_salt: salt }, {
    blockSizeBytes: options.blockSizeBytes,
    maxBlocks: options.maxRoutedBlocks,
    sessionKey: sessionHeaderOf(request.headers),
  });
  // A Responses stream always ends with its usage (`response.completed`): nothing to ask for.
  const asksUsage =
    responses === null &&
    options.requestStreamUsage !== false &&
    generation.stream === true &&
    generation.stream_options?.include_usage !== true;
  const forwarded = forwardedBody(rawBodyOf(request), body as Record<string, unknown>, { asksUsage, salt });
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
  };
}

/**
 * An Anthropic Messages body: the same count limits as chat (`messages`, `tools`, each message's content
 * blocks), the Messages schema, the routing text of system + tools + messages (libs/routing
 * messages-routing.ts). No stream usage is asked for: vLLM's Anthropic endpoint always streams it
 * (`message_delta` carries the usage). A tenant's salt goes in as on chat.
 */
function parseMessages(
  request: FastifyRequest,
  body: Record<string, unknown>,
  options: ParseOptions,
  cacheScope: string | null,
): ParsedRequest {
  const overLimit = checkGenerationLimits(body, options.limits);
  if (overLimit !== null)
    throw new RouterError('ROUTER_ERR_INVALID_REQUEST', overLimit.message, { param: overLimit.param });
  const messages = validateBody(MessagesRequest, body);
  const salt = tenantSalt(options, cacheScope, messages.cache_salt);
  const routingRequest = buildMessagesRoutingRequest(salt === null ? messages : { ...messages, cache_salt: salt }, {
    blockSizeBytes: options.blockSizeBytes,
    maxBlocks: options.maxRoutedBlocks,
    sessionKey: sessionHeaderOf(request.headers),
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
  };
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
 * - Otherwise the body is re-serialised from the parsed one (its keys in their order), with
 *   `include_usage: true` and without `continuous_usage_stats` (which vLLM honours only together with
 *   `include_usage`: kept, it would put usage on every chunk), and the salt. A client's duplicate keys
 *   are gone with it: JSON.parse kept the last, as engines would.
 */
export function forwardedBody(raw: Buffer, parsed: Record<string, unknown>, changes: BodyChanges): Buffer | null {
  const { asksUsage, salt } = changes;
  if (!asksUsage && salt === null) return null;
  const splices =
    (!asksUsage || !Object.hasOwn(parsed, 'stream_options')) && (salt === null || !Object.hasOwn(parsed, 'cache_salt'));
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

function passthroughRoutingRequest(model: string, sessionKey: string | null, blockSizeBytes: number): RoutingRequest {
  return { model, blockHashes: [], blockSizeBytes, textBytes: 0, contextBlocks: 0, headHash: 0, sessionKey };
}

/** The request's `X-Session-Id` (null when absent or empty): its affinity key, before the body's `user` (buildRoutingRequest decides). */
function sessionHeaderOf(headers: FastifyRequest['headers']): string | null {
  const header = headers['x-session-id'];
  return typeof header === 'string' && header !== '' ? header : null;
}
