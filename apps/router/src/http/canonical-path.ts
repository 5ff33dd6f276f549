import { ENGINE_CONTROL_PATHS, ROOT_PASSTHROUGH_PATHS } from '../pipeline/passthrough-paths';

/**
 * The path every request is routed by (Fastify's `rewriteUrl`, before route matching and before the
 * admit stage): one spelling per endpoint, so that no spelling of a path reaches another handler than
 * its plain one. `POST /v1/chat/completions/` used to match the pass-through route, skipping the chat
 * request's parsing, salting and limits, while the engine (whose own router redirects the slash) served
 * it as a chat completion.
 *
 * - One trailing slash is dropped (`/v1/chat/completions/` → `/v1/chat/completions`); two stay two and
 *   are refused by admit as an empty segment.
 * - A path that is one of the router's fixed paths but for letter case (`/V1/Chat/Completions`) takes
 *   that path's spelling. Other paths keep their case: they hold ids (models, responses, files) that
 *   are case-sensitive, and what the router does with them does not depend on case.
 *
 * The rewritten URL is also what is forwarded, so the backend sees the canonical path too. The query is
 * kept as it came.
 */
const FIXED_PATHS = [
  '/v1/chat/completions',
  '/v1/completions',
  '/v1/messages',
  '/v1/messages/count_tokens',
  '/v1/responses',
  '/v1/models',
  '/v1/embeddings',
  '/v1/audio/transcriptions',
  '/v1/audio/translations',
  '/v1/score',
  '/v1/rerank',
  '/v1/classify',
  '/v1/pooling',
  '/v1/files',
  '/v1/batches',
  ...ROOT_PASSTHROUGH_PATHS,
  ...ENGINE_CONTROL_PATHS,
];

const BY_LOWER_CASE = new Map<string, string>(FIXED_PATHS.map((path) => [path.toLowerCase(), path]));

export function canonicalUrl(url: string): string {
  const query = url.indexOf('?');
  let path = query === -1 ? url : url.slice(0, query);
  if (path.length > 1 && path.endsWith('/') && !path.endsWith('//')) path = path.slice(0, -1);
  path = BY_LOWER_CASE.get(path.toLowerCase()) ?? path;
  return query === -1 ? path : path + url.slice(query);
}
