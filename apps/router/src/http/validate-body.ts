import { formatIssuePath, formatValidationIssues, safeParseFirstIssue } from '@kvroute/protocols';
import type { z } from 'zod';
import { RouterError } from '../errors';

/** `body` validated by `schema` (a JSON object required), or a 400 naming its first few issues. The request path's and the admin API's. */
export function validateBody<Schema extends z.ZodType>(schema: Schema, body: unknown): z.infer<Schema> {
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw new RouterError('ROUTER_ERR_INVALID_REQUEST', 'The request body must be a JSON object.');
  }
  // The first issue is enough to answer, and a body of thousands of invalid elements costs zod one.
  const result = safeParseFirstIssue(schema, body);
  if (result.success) return result.data;
  const first = result.error.issues[0];
  const param = first && first.path.length > 0 ? formatIssuePath(first.path) : 'body';
  throw new RouterError('ROUTER_ERR_INVALID_REQUEST', formatValidationIssues(result.error.issues), { param });
}
