import { createHash } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { ChatMessage, multipartBoundaryOf, readFormField } from '@kvroute/protocols';
import { z } from 'zod';
import { EngineError } from '../engine-errors';
import { chatPromptRequestOf, type PromptCodec } from '../text/prompt-codec';
import { checkModel, parseBody } from './generation-routes';

export interface PoolingRoutesOptions {
  readonly servedModel: string;
  readonly maxModelLen: number;
  /** The sim's tokenizer and template (the same ids generation uses). */
  readonly codec: PromptCodec;
  /** Largest multipart body (audio uploads), bytes. */
  readonly bodyLimitBytes: number;
}

/**
 * vLLM's endpoints besides generation, minimal but in vLLM's response shapes, so a router can be tested
 * passing them through: `/tokenize` and `/detokenize` (the sim's tokenizer: a chat as the chat endpoints
 * render it, a prompt with special tokens unless `add_special_tokens: false`, vLLM's defaults), `/v1/embeddings` and
 * `/pooling` (a deterministic unit vector per input, from a hash of its tokens), `/classify` (two classes),
 * `/score` and `/v1/score`,
 * `/rerank`, `/v1/rerank` and `/v2/rerank` (a deterministic score per pair), and
 * `/v1/audio/transcriptions` and `/translations` (multipart/form-data: the form's `model` is checked and
 * the answer names how many bytes the file part held, so a test can see the body arrived whole). They
 * take no engine time: the sim simulates generation, not pooling models. `model` may be absent, as in
 * vLLM (the served model is used).
 */
const EMBEDDING_DIMENSIONS = 8;

const ModelField = { model: z.string().min(1).nullish() };
const TokenizeBody = z.looseObject({
  ...ModelField,
  prompt: z.string().optional(),
  messages: z.array(ChatMessage).optional(),
  tools: z.array(z.unknown()).optional(),
  add_special_tokens: z.boolean().optional(),
});
const DetokenizeBody = z.looseObject({ ...ModelField, tokens: z.array(z.number().int().nonnegative()) });
const TextInput = z.union([
  z.string(),
  z.array(z.string()),
  z.array(z.number().int()),
  z.array(z.array(z.number().int())),
]);
const EmbeddingsBody = z.looseObject({
  ...ModelField,
  input: TextInput,
  encoding_format: z.enum(['float', 'base64']).optional(),
});
const ScoreBody = z.looseObject({
  ...ModelField,
  text_1: z.union([z.string(), z.array(z.string())]),
  text_2: z.union([z.string(), z.array(z.string())]),
});
const RerankBody = z.looseObject({
  ...ModelField,
  query: z.string(),
  documents: z.array(z.string()),
  top_n: z.number().int().positive().optional(),
});

export async function poolingRoutes(app: FastifyInstance, options: PoolingRoutesOptions): Promise<void> {
  const modelOf = (model: string | null | undefined): string => {
    const name = model ?? options.servedModel;
    checkModel(name, options.servedModel);
    return name;
  };
  const created = () => Math.floor(Date.now() / 1000);
  const { codec } = options;
  const tokenLists = (input: z.infer<typeof TextInput>): number[][] => tokenListsOf(codec, input);

  app.post('/tokenize', async (request) => {
    const body = parseBody(TokenizeBody, request.body);
    modelOf(body.model);
    const prompt = body.prompt ?? '';
    const tokens =
      body.messages !== undefined
        ? codec.chatPromptTokens(chatPromptRequestOf({ ...body, messages: body.messages }))
        : body.add_special_tokens === false
          ? codec.textTokens(prompt)
          : codec.completionPromptTokens(prompt);
    return { count: tokens.length, max_model_len: options.maxModelLen, tokens, token_strs: null };
  });

  app.post('/detokenize', async (request) => {
    const body = parseBody(DetokenizeBody, request.body);
    modelOf(body.model);
    const prompt = codec.detokenize(body.tokens);
    if (prompt === null)
      throw new EngineError('internal', `/detokenize is not served with --tokenizer (${codec.name}): no decoder.`, 501);
    return { prompt };
  });

  const embed = (route: string, object: 'embedding' | 'pooling', idPrefix: string) =>
    app.post(route, async (request) => {
      const body = parseBody(EmbeddingsBody, request.body);
      const model = modelOf(body.model);
      const inputs = tokenLists(body.input);
      // `encoding_format: "base64"` (the openai client's default): the float32 vector's little-endian bytes, as vLLM sends it.
      const encode = (vector: number[]): number[] | string =>
        body.encoding_format === 'base64' ? Buffer.from(Float32Array.from(vector).buffer).toString('base64') : vector;
      const data = inputs.map((tokens, index) =>
        object === 'embedding'
          ? { index, object, embedding: encode(unitVector(tokens)) }
          : { index, object, data: encode(unitVector(tokens)) },
      );
      const promptTokens = inputs.reduce((sum, tokens) => sum + tokens.length, 0);
      return {
        id: `${idPrefix}-${randomId()}`,
        object: 'list',
        created: created(),
        model,
        data,
        usage: {
          prompt_tokens: promptTokens,
          total_tokens: promptTokens,
          completion_tokens: 0,
          prompt_tokens_details: null,
        },
      };
    });
  embed('/v1/embeddings', 'embedding', 'embd');
  embed('/pooling', 'pooling', 'pool');

  app.post('/classify', async (request) => {
    const body = parseBody(EmbeddingsBody, request.body);
    const model = modelOf(body.model);
    const inputs = tokenLists(body.input);
    // Two classes, probabilities from the input's vector: deterministic per input.
    const data = inputs.map((tokens, index) => {
      const positive = ((unitVector(tokens)[0] ?? 0) + 1) / 2;
      const probs = [1 - positive, positive];
      return { index, label: positive >= 0.5 ? 'LABEL_1' : 'LABEL_0', probs, num_classes: probs.length };
    });
    const promptTokens = inputs.reduce((sum, tokens) => sum + tokens.length, 0);
    return {
      id: `classify-${randomId()}`,
      object: 'list',
      created: created(),
      model,
      data,
      usage: {
        prompt_tokens: promptTokens,
        total_tokens: promptTokens,
        completion_tokens: 0,
        prompt_tokens_details: null,
      },
    };
  });

  for (const route of ['/score', '/v1/score']) {
    app.post(route, async (request) => {
      const body = parseBody(ScoreBody, request.body);
      const model = modelOf(body.model);
      const lefts = [body.text_1].flat();
      const rights = [body.text_2].flat();
      const pairs = rights.map(
        (right, index) => [lefts.length === 1 ? (lefts[0] as string) : (lefts[index] ?? ''), right] as const,
      );
      const data = pairs.map(([left, right], index) => ({ index, object: 'score', score: pairScore(left, right) }));
      const tokens = pairs.reduce(
        (sum, [left, right]) => sum + codec.textTokens(left).length + codec.textTokens(right).length,
        0,
      );
      return {
        id: `score-${randomId()}`,
        object: 'list',
        created: created(),
        model,
        data,
        usage: { prompt_tokens: tokens, total_tokens: tokens, completion_tokens: 0, prompt_tokens_details: null },
      };
    });
  }

  for (const route of ['/rerank', '/v1/rerank', '/v2/rerank']) {
    app.post(route, async (request) => {
      const body = parseBody(RerankBody, request.body);
      const model = modelOf(body.model);
      const results = body.documents
        .map((text, index) => ({ index, document: { text }, relevance_score: pairScore(body.query, text) }))
        .sort((a, b) => b.relevance_score - a.relevance_score)
        .slice(0, body.top_n ?? body.documents.length);
      const tokens = body.documents.reduce(
        (sum, text) => sum + codec.textTokens(body.query).length + codec.textTokens(text).length,
        0,
      );
      return { id: `rerank-${randomId()}`, model, usage: { total_tokens: tokens }, results };
    });
  }

  // Audio: multipart bodies, kept as bytes (this plugin's parser only: Fastify scopes it to these routes).
  app.addContentTypeParser(
    'multipart/form-data',
    { parseAs: 'buffer', bodyLimit: options.bodyLimitBytes },
    (_request, body, done) => done(null, body),
  );
  for (const route of ['/v1/audio/transcriptions', '/v1/audio/translations']) {
    app.post(route, async (request) => {
      const raw = request.body;
      const boundary = multipartBoundaryOf(request.headers['content-type']);
      if (!Buffer.isBuffer(raw) || boundary === null)
        throw new EngineError('bad-request', 'Expected a multipart/form-data body.');
      const model = readFormField(raw, boundary, 'model', { maxParts: 64, maxValueBytes: 1024 });
      if (model.kind === 'malformed') throw new EngineError('bad-request', `Invalid form: ${model.reason}`);
      modelOf(model.kind === 'found' ? model.value : undefined);
      const file = fileBytes(raw, boundary);
      if (file === null) throw new EngineError('bad-request', 'The form has no `file` part.');
      return {
        text: `sim ${route.endsWith('translations') ? 'translation' : 'transcription'} of ${file.length} bytes`,
        sim_file_sha256: createHash('sha256').update(file).digest('hex'),
      };
    });
  }
}

/** Inputs' ids: texts with special tokens (vLLM's pooling default), token ids as given. */
function tokenListsOf(codec: PromptCodec, input: z.infer<typeof TextInput>): number[][] {
  if (typeof input === 'string') return [codec.completionPromptTokens(input)];
  if (input.length === 0) return [];
  if (typeof input[0] === 'string') return (input as string[]).map((text) => codec.completionPromptTokens(text));
  if (typeof input[0] === 'number') return [input as number[]];
  return input as number[][];
}

/** A unit vector that is a pure function of the tokens (so equal inputs embed equally). */
function unitVector(tokens: readonly number[]): number[] {
  const digest = createHash('sha256').update(Int32Array.from(tokens)).digest();
  const raw = Array.from({ length: EMBEDDING_DIMENSIONS }, (_, index) => digest.readInt16LE(index * 2) / 32768);
  const norm = Math.hypot(...raw) || 1;
  return raw.map((value) => value / norm);
}

/** A score in [0, 1): a pure function of the pair. */
function pairScore(left: string, right: string): number {
  return createHash('sha256').update(left).update('\u0000').update(right).digest().readUInt32LE(0) / 2 ** 32;
}

function randomId(): string {
  return createHash('sha256').update(String(Math.random())).digest('hex').slice(0, 24);
}

/** The bytes of the form's `file` part (null: none), found by its name in the part headers. */
function fileBytes(raw: Buffer, boundary: string): Buffer | null {
  const separator = Buffer.from(`\r\n--${boundary}`);
  const marker = raw.indexOf('name="file"');
  if (marker === -1) return null;
  const start = raw.indexOf('\r\n\r\n', marker);
  if (start === -1) return null;
  const end = raw.indexOf(separator, start + 4);
  return end === -1 ? null : raw.subarray(start + 4, end);
}
