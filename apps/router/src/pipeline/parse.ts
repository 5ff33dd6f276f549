import type { FastifyInstance, FastifyRequest } from 'fastify';
import { ChatCompletionRequest, checkGenerationLimits, CompletionRequest, measureJsonNesting, type GenerationLimits } from '@kvroute/protocols';
import { buildRoutingRequest, type RoutingRequest } from '@kvroute/routing';
import { RouterError } from '../errors';
import { validateBody } from '../http/validate-body';

declare module 'fastify' {
  interface FastifyRequest {
    /** The request body exactly as received: forwarded unchanged to the backend. */
    rawBody?: Buffer;
  }
}

/**
 * Stage 2 of the request path, **parse**: the body, bounded before anything costly looks at it.
 *
 * 1. The body parser (every content type is read as JSON, as engines do) keeps the raw bytes, which are
 *    what gets forwarded: a proxy must not re-serialise a body, engines accept fields we do not know.
 *    Before `JSON.parse` one pass over the bytes refuses nesting deeper than `maxJsonDepth` anywhere,
 *    known field or not, so no later step (validation, routing text) recurses on hostile depth.
 * 2. Counts (messages, tools, content parts, prompt entries) are checked on the parsed object, before
 *    validation: a body of 200,000 invalid messages is refused at its count, not after 200,000 issues.
 * 3. Validation (zod) reports its first few issues, capped in bytes.
 * 4. The routing request: the routing text's block hashes (at most `maxRoutedBlocks`), session key,
 *    generation budget.
 */
export interface ParseOptions {
  readonly blockSizeBytes: number;
  /** Leading blocks of the routing text routed on (the rest is not hashed): bounds the state's work per request. */
  readonly maxRoutedBlocks: number;
  readonly maxJsonDepth: number;
  readonly limits: GenerationLimits;
}

/** What the later stages need of a request: its model (the pool) and what the policy reads. */
export interface ParsedRequest {
  readonly model: string;
  /** `generation`: chat and text completions, routed by the policy; `passthrough`: other `POST /v1/*`. */
  readonly kind: 'generation' | 'passthrough';
  readonly routingRequest: RoutingRequest;
}

export type Endpoint = 'chat' | 'completions' | 'passthrough';

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

/** Registers the body parser (step 1). */
export function registerBodyParser(app: FastifyInstance, bodyLimitBytes: number, maxJsonDepth: number): void {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: bodyLimitBytes }, (request, body, done) => {
    const raw = body as Buffer;
    request.rawBody = raw;
    if (raw.length === 0) return done(new RouterError('ROUTER_ERR_INVALID_JSON', 'The request body is empty; expected a JSON object.'), undefined);
    const nesting = measureJsonNesting(raw, maxJsonDepth);
    if (nesting.tooDeep) {
      return done(new RouterError('ROUTER_ERR_INVALID_REQUEST', `The request body nests deeper than ${maxJsonDepth} levels (at byte ${nesting.offset}).`), undefined);
    }
    const parse = (text: string): void => {
      try {
        done(null, JSON.parse(text));
      } catch (error) {
        done(new RouterError('ROUTER_ERR_INVALID_JSON', `The request body is not valid JSON: ${(error as Error).message.slice(0, 200)}`), undefined);
      }
    };
    if (raw.length < LARGE_BODY_BYTES) return parse(raw.toString('utf8'));
    setImmediate(() => {
      const text = raw.toString('utf8');
      setImmediate(() => parse(text));
    });
  });
}

/** Steps 2–4 for one request of `endpoint`. Throws a RouterError (400) for what it refuses. */
export async function parseRequest(endpoint: Endpoint, request: FastifyRequest, options: ParseOptions): Promise<ParsedRequest> {
  if ((request.rawBody?.length ?? 0) >= LARGE_BODY_BYTES) await nextTurn();
  const body = request.body;
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new RouterError('ROUTER_ERR_INVALID_REQUEST', 'The request body must be a JSON object.');
  }
  if (endpoint === 'passthrough') {
    const model = (body as { model?: unknown }).model;
    if (typeof model !== 'string' || model === '') throw new RouterError('ROUTER_ERR_INVALID_REQUEST', '`model` is required.', { param: 'model' });
    return { model, kind: 'passthrough', routingRequest: passthroughRoutingRequest(model, sessionHeaderOf(request.headers), options.blockSizeBytes) };
  }
  const generation = validateGenerationBody(endpoint, body, options.limits);
  const routingRequest = buildRoutingRequest(generation, {
    blockSizeBytes: options.blockSizeBytes,
    maxBlocks: options.maxRoutedBlocks,
    sessionKey: sessionHeaderOf(request.headers),
  });
  return { model: generation.model, kind: 'generation', routingRequest };
}

/** Counts, then the schema: the validated chat or completion body. */
function validateGenerationBody(endpoint: 'chat' | 'completions', body: unknown, limits: GenerationLimits): ChatCompletionRequest | CompletionRequest {
  const overLimit = checkGenerationLimits(body, limits);
  if (overLimit !== null) throw new RouterError('ROUTER_ERR_INVALID_REQUEST', overLimit.message, { param: overLimit.param });
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
