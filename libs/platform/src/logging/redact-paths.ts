/**
 * Log paths pino replaces with `[Redacted]` before a line is written. Rule: prompt and completion text, and
 * credentials, never reach a log; log a prompt's length and hash instead. The key stays in the output (censor, not
 * remove) so a reader can see that something was there.
 *
 * Path syntax is pino's: `*` matches exactly one level, so `*.prompt` covers `{ req: { prompt } }` but not
 * `{ req: { body: { prompt } } }`; that deeper case is covered because whole bodies are redacted. Untrusted data
 * should be logged under a key we chose (house rule 9), which keeps these paths short and exact.
 */
export const REDACT_PATHS: readonly string[] = [
  // Completions API prompt text, logged directly or one object down (e.g. `request.prompt`).
  'prompt',
  '*.prompt',
  // Chat API message list (system prompt and every turn), at the top level or one object down.
  'messages',
  '*.messages',
  // Request and response bodies carry prompts and generated text in full; never log them, at either depth.
  'body',
  '*.body',
  // Bearer tokens and API keys on incoming requests (fastify's `req` serializer shape) and on upstream calls.
  'req.headers.authorization',
  'req.headers["x-api-key"]',
  'req.headers.cookie',
  'headers.authorization',
  'headers["x-api-key"]',
  'headers.cookie',
  // Session cookies set by an upstream and echoed in response logs.
  'res.headers["set-cookie"]',
];

/** What a redacted value is replaced with. */
export const REDACTED = '[Redacted]';
