import type { EngineVersion } from '../engine/engine';
import { EngineError } from '../engine-errors';

/**
 * `cache_salt` as vLLM's OpenAI server takes it (README "cache_salt"): absent or null means no salt;
 * anything else must be a non-empty string of at most 128 characters without '@', '/', '\' or NUL,
 * else 400 with vLLM's sentence. The V0 engine refused the field outright (vLLM 0.9–0.10).
 *
 * The limits are those of the newest vLLM (≥ the LMCache hardening, #51444); 0.9–0.11 took any
 * non-empty string. A salt valid here is valid on every version, so a router tested against the sim
 * cannot depend on a laxer engine.
 */

/** Longest salt vLLM accepts, in Unicode code points (Python's `len`), not UTF-16 units. */
const MAX_SALT_CODE_POINTS = 128;

/** Characters vLLM refuses in a salt: separators of the KV-offload backends' keys and file names. */
const FORBIDDEN_SALT_CHARS = /[@/\\\0]/;

export const CACHE_SALT_NOT_SUPPORTED_ON_V0 =
  "Parameter 'cache_salt' is not supported with this instance of vLLM, which uses engine V0.";
export const CACHE_SALT_NOT_NON_EMPTY_STRING = "Parameter 'cache_salt' must be a non-empty string if provided.";
export const CACHE_SALT_TOO_LONG_OR_FORBIDDEN =
  "Parameter 'cache_salt' must be at most 128 characters and must not contain '@', '/', '\\\\', or NUL.";

/**
 * The request's salt, validated; undefined when it has none. Run on the raw body before the request
 * schema, as vLLM's check is a model validator that runs before field validation (so a bad salt is
 * the error reported even when other fields are also wrong). A non-object body is left to the schema.
 */
export function readCacheSalt(body: unknown, engineVersion: EngineVersion): string | undefined {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return undefined;
  const salt = (body as { cache_salt?: unknown }).cache_salt;
  if (salt === undefined || salt === null) return undefined;
  if (engineVersion === 'v0') throw new EngineError('bad-request', CACHE_SALT_NOT_SUPPORTED_ON_V0);
  if (typeof salt !== 'string' || salt.length === 0)
    throw new EngineError('bad-request', CACHE_SALT_NOT_NON_EMPTY_STRING);
  if (countCodePoints(salt) > MAX_SALT_CODE_POINTS || FORBIDDEN_SALT_CHARS.test(salt)) {
    throw new EngineError('bad-request', CACHE_SALT_TOO_LONG_OR_FORBIDDEN);
  }
  return salt;
}

/**
 * The body without a null `cache_salt`: vLLM treats null as absent, the shared request schema
 * (libs/protocols) types the field as an optional string. Copies only in that case.
 */
export function withoutNullCacheSalt(body: unknown): unknown {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) return body;
  if ((body as { cache_salt?: unknown }).cache_salt !== null) return body;
  const { cache_salt: _null, ...rest } = body as Record<string, unknown>;
  return rest;
}

function countCodePoints(text: string): number {
  let count = 0;
  for (const _codePoint of text) count++;
  return count;
}
