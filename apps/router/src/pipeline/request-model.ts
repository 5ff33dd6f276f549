import type { FastifyRequest } from 'fastify';
import { multipartBoundaryOf, readFormField } from '@kvroute/protocols';
import { RouterError } from '../errors';

/**
 * The model a request names, which picks its pool (parse stage).
 *
 * A request without `model`: vLLM serves it with its served model (its OpenAI protocol has
 * `model: str | None = None`, and the serving layer falls back to the first served model name), so a
 * client that works against one vLLM sends none. The router's rule: when the backends serve exactly
 * one model, that is the request's model (what every backend would pick); with several models it cannot
 * know which one was meant: 400; with none discovered yet: 503 with Retry-After. `model` present but
 * empty or not a string stays a 400, as vLLM answers. Anthropic Messages always need it (vLLM's
 * `AnthropicMessagesRequest.model` is required), so that endpoint does not use this rule.
 */
export function resolveModel(given: unknown, servedModels: () => readonly string[], param = 'model'): string {
  if (typeof given === 'string' && given !== '') return given;
  if (given !== undefined && given !== null)
    throw new RouterError('ROUTER_ERR_INVALID_REQUEST', '`model` must be a non-empty string.', { param });
  const models = servedModels();
  if (models.length === 1) return models[0] as string;
  if (models.length === 0) {
    throw new RouterError(
      'ROUTER_ERR_NO_BACKEND',
      'The request names no `model` and no backend has reported its models yet; retry.',
      { retryAfterSeconds: 1 },
    );
  }
  throw new RouterError(
    'ROUTER_ERR_INVALID_REQUEST',
    `\`model\` is required: this router serves ${models.length} models (GET /v1/models lists them).`,
    { param },
  );
}

/** Parts of a form read before giving up on finding `model` (a transcription form has ~10 fields). */
const MAX_FORM_PARTS = 64;
/** Longest `model` value read from a form, bytes (model ids and LoRA names are far shorter). */
const MAX_FORM_MODEL_BYTES = 1024;

/**
 * The `model` field of a `multipart/form-data` body (vLLM's audio endpoints), read from the raw bytes
 * without parsing the file parts (libs/protocols multipart-form.ts); absent → resolveModel's rule.
 */
export function modelOfForm(request: FastifyRequest, raw: Buffer, servedModels: () => readonly string[]): string {
  const contentType = request.headers['content-type'];
  const boundary = multipartBoundaryOf(typeof contentType === 'string' ? contentType : undefined);
  if (boundary === null)
    throw new RouterError(
      'ROUTER_ERR_INVALID_REQUEST',
      'A multipart/form-data body needs a `boundary` parameter in its Content-Type.',
    );
  const field = readFormField(raw, boundary, 'model', {
    maxParts: MAX_FORM_PARTS,
    maxValueBytes: MAX_FORM_MODEL_BYTES,
  });
  if (field.kind === 'malformed')
    throw new RouterError(
      'ROUTER_ERR_INVALID_REQUEST',
      `The multipart/form-data body is not accepted: ${field.reason}.`,
    );
  return resolveModel(field.kind === 'found' ? field.value : undefined, servedModels);
}
